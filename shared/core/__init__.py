"""The foundations every layer shares: typed settings, the error tree, the trigger-event format, the names of
queues and blobs (`layout`), lanes, and the pure rules (back-off). No I/O, no feature.
"""
