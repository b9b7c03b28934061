"""What 1, 100 and 1,000 tenant lanes cost, idle and draining (`python -m bench.tenants`)."""
