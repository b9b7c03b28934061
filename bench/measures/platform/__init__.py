"""A seeded model of Flex Consumption draining one backlog: the app's policy against the built-in trigger (`python -m
bench.platform`).
"""
