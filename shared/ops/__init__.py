"""What operators and clients read and do: batch and queue status, the batch list, poison replay (now or as a
background job), the operator's page and a batch's trace waterfall.
"""
