"""Cost and time against a batch's size, 10^3 to 10^6 items, extended to 10^7 (`python -m bench.curves`)."""
