"""A newcomer behind a big backlog, the handler's limits, and Azurite's part of the wait (`python -m
bench.fairness`).
"""
