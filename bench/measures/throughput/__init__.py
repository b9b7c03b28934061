"""Drain throughput and transactions per 1,000 items: the app and every peer on the same backlog, and its memory."""
