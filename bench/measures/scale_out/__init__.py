"""One and two local function hosts draining one backlog with a CPU-bound handler (`python -m bench.scale_out`)."""
