"""A batch's way in: the request body decoded within its limits (`body`), then stored in chunks, committed and
announced (`submit`).
"""
