"""The peers queue-drain is measured against, each faithful to its documented algorithm.

- `builtin_trigger`: (a) the Azure Functions queue trigger (WebJobs SDK `QueueListener`).
- `fixed_poller`: (b) the naive loop, one message per GetMessages, 1 s sleep when empty.
- `capped_backoff`: (c) the simple capped exponential back-off poller.
- `chunked`: (a') the built-in trigger's loop fed the app's own chunk messages (`bench.chunked`).
- `whitepaper`: (d) the whitepaper's queue listener with randomized back-off and dequeue-task scaling.

Each takes a `PeerQueue` (the real storage queue, or `SimQueue` on a simulated clock), a handler and a clock.
"""

from __future__ import annotations

from bench.peers.base import Handler, Peer, PeerQueue
from bench.peers.builtin_trigger import BuiltinQueueTrigger
from bench.peers.capped_backoff import CappedBackoffPoller
from bench.peers.chunked import BuiltinChunkTrigger
from bench.peers.fixed_poller import FixedPoller
from bench.peers.whitepaper import WhitepaperListener

PEERS: dict[str, type[Peer]] = {
    "a": BuiltinQueueTrigger,
    "b": FixedPoller,
    "c": CappedBackoffPoller,
    "d": WhitepaperListener,
}

# Fed the app's own chunk messages, not one item per message (`bench.chunked`): outside PEERS, whose loop
# every phase of `make bench` runs with one-item messages.
CHUNKED: dict[str, type[Peer]] = {"a2": BuiltinChunkTrigger}

LABELS = {
    "a": "(a) built-in queue trigger",
    "a2": "(a') built-in queue trigger, fed the app's 250-item chunks",
    "b": "(b) fixed 1 s poller",
    "c": "(c) capped exponential poller",
    "d": "(d) whitepaper listener",
    "app": "queue-drain",
}

__all__ = ["CHUNKED", "LABELS", "PEERS", "Handler", "Peer", "PeerQueue"]
