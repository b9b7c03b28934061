"""Moving messages to consumers, and waking up for them: the receivers of each queue, the pump that hands them
messages one each around the ring while credit lasts, and the proton timer armed for the next lock expiry,
schedule or TTL (`Wakeups` knows when; this arms the one timer that fires then).
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable

from proton import Endpoint, Handler, Link, Sender
from proton.reactor import Container

from emulators.servicebus import codec
from emulators.servicebus.entities import Queue
from emulators.servicebus.peers import send
from emulators.servicebus.wakeups import Wakeups


class Dispatch:
    """The consumers of every queue and the broker's single timer; `timer_handler` gets `on_timer_task`."""

    def __init__(self, clock: Callable[[], int], timer_handler: Handler) -> None:
        self.clock = clock
        self.container: Container | None = None  # set when the reactor starts
        self.stopping = False  # no more timers once the broker shuts down
        self._timer_handler = timer_handler
        self._consumers: dict[str, list[Sender]] = {}
        self._wakeups = Wakeups()
        self._armed_ms: list[int] = []  # heap: when the proton timers already scheduled will fire

    def add_consumer(self, queue: Queue, link: Sender) -> None:
        self._consumers.setdefault(queue.name, []).append(link)
        self.pump(queue)

    def remove_consumer(self, queue: Queue, link: Sender) -> None:
        consumers = self._consumers.get(queue.name, [])
        if link in consumers:
            consumers.remove(link)

    def pump(self, queue: Queue) -> None:
        """Hand available messages to the receivers of this queue and of its dead-letter queue, then make sure
        the broker wakes up for the locks just taken.

        Anything that changes a queue (a settlement, a lock or TTL running out, a receive that finds expired
        messages) may move messages into its dead-letter queue, whose receivers may hold credit already. And a
        lock taken when a client grants credit may be followed by nothing else on this queue: without a wake-up
        a receiver already waiting would never see the message again.
        """
        self._pump_one(queue)
        if queue.dead_letter_queue is not None:
            self._pump_one(queue.dead_letter_queue)
        self.touch(queue)

    def _pump_one(self, queue: Queue) -> None:
        """Hand available messages to this queue's receivers, one each around the ring while credit lasts."""
        consumers = self._consumers.get(queue.name)
        if not consumers:
            return
        now = self.clock()
        progressed = True
        while progressed:
            progressed = False
            for link in consumers:
                if link.credit <= 0 or not link.state & Endpoint.LOCAL_ACTIVE:
                    continue
                message = queue.receive(now, lock=link.snd_settle_mode != Link.SND_SETTLED)
                if message is None:
                    return
                # In peek-lock the delivery tag is the lock token (the SDK reads it as UUID(bytes_le=tag)).
                token = message.lock_token
                delivery = send(link, (token or uuid.uuid4()).bytes_le, codec.render(message), settled=token is None)
                delivery.lock_token = token
                progressed = True
            consumers.append(consumers.pop(0))  # the next pump starts with the next receiver

    def touch(self, queue: Queue) -> None:
        """Make sure the broker wakes up when this queue (or its dead-letter queue) next has something due."""
        self._wakeups.note(queue)
        if queue.dead_letter_queue is not None:
            self._wakeups.note(queue.dead_letter_queue)
        self._arm_timer()

    def timer_fired(self) -> None:
        """The earliest armed timer fired: apply what is due on each queue, hand out what freed up, re-arm."""
        if self._armed_ms:
            heapq.heappop(self._armed_ms)  # timers fire in order: this one was the earliest
        now = self.clock()
        for queue in self._wakeups.pop_due(now):
            queue.advance(now)
            self.pump(queue)
        self._arm_timer()

    def _arm_timer(self) -> None:
        due = self._wakeups.next_due_ms()
        if due is None or self.container is None or self.stopping:
            return
        if self._armed_ms and self._armed_ms[0] <= due:
            return  # a timer that fires early enough is already set
        heapq.heappush(self._armed_ms, due)
        self.container.schedule(max(0.0, (due - self.clock()) / 1000) + 0.001, self._timer_handler)
