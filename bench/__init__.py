"""Benchmarks: queue-drain side by side with the built-in queue trigger and classic pollers (`make bench`)."""
