"""The watchers: a chain of looks scheduled on Service Bus while a queue holds messages (`lookout`), and the
timer's rare tick, the last net (`fallback`). Both look at a partition the same way (`inspect`).
"""
