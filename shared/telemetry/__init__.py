"""What the app tells its operators: spans (`tracing`), metrics, the storage-transaction counter (`metering`),
what this process settled (`activity`), and where all of it is exported (`export`).
"""
