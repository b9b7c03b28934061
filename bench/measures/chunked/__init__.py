"""Peer (a'): the built-in queue trigger fed the app's own chunks, beside (a) and the app all in (`python -m
bench.chunked`).
"""
