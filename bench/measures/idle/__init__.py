"""Idle transactions per queue per day: each policy's real code on a simulated day, and a real-time window."""
