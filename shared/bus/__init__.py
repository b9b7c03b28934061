"""Service Bus, the doorbell: publishing, scheduling and cancelling trigger events (`publisher`), and the events
a process must ring again once Service Bus answers (`deferrals`).
"""
