"""The benchmarks' shared tools: the stack of services, clocks, statistics, steady windows, items, handlers,
the machine's description, and where results live (`results`)."""
