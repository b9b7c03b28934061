"""The drain engine: one drainer per queue slot receives pages of chunk messages from the queue's lanes, admits
and works each chunk under the handler limits, settles it, and leaves behind the wake-ups that keep the queue
watched. It knows no feature beyond draining: the router (`shared.router`) sends it drain events only.
"""
