"""(a) The Azure Functions queue trigger, as the WebJobs SDK's `QueueListener` and `QueueProcessor` do it.

- One GetMessages of `batchSize` (16) with a 10-minute visibility timeout; every message is processed
  concurrently; the next GetMessages as soon as in-flight messages are down to `newBatchThreshold`
  (batchSize / 2 per vCPU: 8 on one vCPU).
- After an empty GetMessages, `RandomizedExponentialBackoffStrategy(100 ms, maxPollingInterval 60 s)`:
  `100 ms + U(0.8, 1.2) * 2^(k-1) * 100 ms`, the k-th empty poll in a row; at the cap it stays at exactly
  60 s (no jitter); any message resets it (the first empty poll after work waits the 100 ms minimum).
- A running message's visibility is renewed at half the timeout. Success: delete. Failure: release
  (visibility 0) until its dequeue count reaches `maxDequeueCount` (5), then copy to `<queue>-poison` and delete;
  a message already dequeued more than 5 times goes to poison unprocessed.
"""

from __future__ import annotations

import asyncio
import logging

from bench.peers.base import Message, Peer

log = logging.getLogger(__name__)

MINIMUM_INTERVAL_S = 0.1  # QueuePollingIntervals.Minimum
MAX_POLLING_INTERVAL_S = 60.0  # host.json extensions.queues.maxPollingInterval default
DELTA_BACKOFF_S = 0.1  # the strategy's deltaBackoff defaults to the minimum interval
RANDOMIZATION = 0.2
BATCH_SIZE = 16
NEW_BATCH_THRESHOLD = BATCH_SIZE // 2  # per vCPU; one vCPU here
VISIBILITY_S = 600
MAX_DEQUEUE_COUNT = 5


class RandomizedExponentialBackoff:
    """`RandomizedExponentialBackoffStrategy.GetNextDelay`, with the random draw `u` in [0, 1) passed in."""

    def __init__(
        self,
        minimum_s: float = MINIMUM_INTERVAL_S,
        maximum_s: float = MAX_POLLING_INTERVAL_S,
        delta_s: float = DELTA_BACKOFF_S,
    ) -> None:
        self.minimum_s, self.maximum_s, self.delta_s = minimum_s, maximum_s, delta_s
        self.current_s = 0.0
        self.exponent = 0

    def next_delay(self, *, succeeded: bool, u: float) -> float:
        if succeeded:
            self.current_s, self.exponent = self.minimum_s, 1
        elif self.current_s != self.maximum_s:
            interval = self.minimum_s
            if self.exponent > 0:
                spread = 1 - RANDOMIZATION + 2 * RANDOMIZATION * u
                interval += spread * 2 ** (self.exponent - 1) * self.delta_s
            if interval < self.maximum_s:
                self.current_s = interval
                self.exponent += 1
            else:
                self.current_s = self.maximum_s
        return self.current_s


class BuiltinQueueTrigger(Peer):
    batch_size = BATCH_SIZE
    new_batch_threshold = NEW_BATCH_THRESHOLD

    async def run(self) -> None:
        backoff = RandomizedExponentialBackoff()
        in_flight: set[asyncio.Task[None]] = set()
        found_since_delay = False
        while self.running():
            batch = await self.queue.get(self.batch_size, VISIBILITY_S)
            if batch:
                for message in batch:
                    task = asyncio.create_task(self.process(message))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
                found_since_delay = True
                while len(in_flight) > self.new_batch_threshold:
                    await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                continue
            delay = backoff.next_delay(succeeded=found_since_delay, u=self.random.random())
            found_since_delay = False
            await self.clock.sleep(delay)
        if in_flight:
            await asyncio.gather(*in_flight)

    async def process(self, message: Message) -> None:
        if message.dequeue_count > MAX_DEQUEUE_COUNT:
            await self.queue.poison(message)
            return
        work = asyncio.create_task(self.handle(message))
        while True:
            done, _ = await asyncio.wait({work}, timeout=VISIBILITY_S / 2)
            if done:
                break
            await self.queue.release(message, VISIBILITY_S)  # keep it invisible while the function runs
        if work.result():
            await self.queue.delete(message)
        elif message.dequeue_count >= MAX_DEQUEUE_COUNT:
            await self.queue.poison(message)
        else:
            await self.queue.release(message, 0)
