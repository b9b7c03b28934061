"""What tracing costs the drain: paired rounds with tracing off and on (`python -m bench.tracing_cost`)."""
