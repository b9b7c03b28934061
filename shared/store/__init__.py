"""Azure Storage, behind one adapter (`storage`, which translates SDK errors into `shared.core.errors`), and
what the app keeps there: leases, the batch index, result blobs, the poison index, the fallback's back-off.
"""
