"""An idle app's transactions by source, all sources counted, against the built-in trigger (`python -m
bench.idle_sources`).
"""
