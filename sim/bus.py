"""Service Bus in memory: the trigger queue with scheduled messages, cancellation, peek-lock delivery,
redelivery and dead-lettering after MaxDeliveryCount, and a `Publisher` the app's code publishes through.

Modelled: immediate and scheduled sends (a sequence number for each scheduled one), cancelling a scheduled
message (refused once its time has come, delivered or not, and for a number never issued, as the service
refuses it), competing receivers that each take one message at a time (host.json `maxConcurrentCalls` 1,
`prefetchCount` 0), a lock held while the function runs (the host renews it) and lost with the instance that
held it (redelivered once the lock duration passes), `abandon` on a function's exception, dead-lettering at
the abandon or lock expiry that ends the `MAX_DELIVERY_COUNT`th delivery. Faults: the namespace away for a
span (sends and cancels fail after part of the publish timeout, nothing is delivered), a sent message lost,
duplicated or delayed; the publisher's own failures while deliveries go on (a send refused, or the link dropped
before or after the message went out, answered as unreachable either way); the host's lock renewals failing
(held locks lapse and their messages are delivered again while the first function still runs), and a complete
that fails (the message comes back after its lock).

Not modelled: sessions, duplicate detection, TTL expiry (the app's events never expire before they are
delivered), message size limits, throttling.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from shared.core.errors import TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from sim.scenario import Scenario

MAX_DELIVERY_COUNT = 10
LOCK_S = 60.0  # the trigger queue's lock duration: a crashed holder's message returns after it


@dataclass
class Delivery:
    sequence: int
    body: bytes
    available_s: float
    scheduled_s: float | None  # when a scheduled message is due (None: sent now)
    delivery_count: int = 0
    holder: object | None = None
    locked_until_s: float = 0.0


@dataclass
class BusWeather:
    """What Service Bus does right now (the world's fault plan sets these)."""

    down: Callable[[], bool] = field(default=lambda: False)
    lose: float = 0.0  # chance that an accepted send is never delivered
    duplicate: float = 0.0
    delay_s: float = 0.0  # extra delivery delay, up to this many seconds
    # The publisher's own failures while deliveries go on: "refused" (the send is answered with an error, nothing
    # sent) or "link" (the link drops during the send: the message may have gone out all the same).
    send_fault: Callable[[], str | None] = field(default=lambda: None)
    renewing: Callable[[], bool] = field(default=lambda: True)  # the host renews the locks it holds
    lose_doorbells: bool = False  # every doorbell (a `submitted` event) accepted is lost: the look chain's net
    forge_doorbells: bool = False  # every doorbell comes after a copy of it that names another attempt

    def take(self, scenario: Scenario) -> None:
        """The scenario's Service Bus faults."""
        self.lose, self.duplicate, self.delay_s = scenario.bus_lose, scenario.bus_duplicate, scenario.bus_delay_s
        self.lose_doorbells, self.forge_doorbells = scenario.lose_doorbells, scenario.forge_doorbells


class Broker:
    """The trigger queue."""

    def __init__(self, now: Callable[[], float], rng: random.Random, weather: BusWeather) -> None:
        self.now, self.rng, self.weather = now, rng, weather
        self.messages: list[Delivery] = []
        self.dead: list[Delivery] = []
        self.sent = self.lost = self.duplicated = 0
        self.sends: list[tuple[float, bytes]] = []  # (epoch s, body) of every message accepted (doorbells too)
        self.dropped: list[bytes] = []  # the bodies of the messages accepted and lost
        self._sequence = 0
        self._wake: asyncio.Event = asyncio.Event()
        # How long a receiver waits when nothing is due (a send, an abandon or a lost holder wakes it sooner); the
        # first six families keep 1 s, so their schedules stay as they were.
        self.idle_wait_s = 1.0

    def _notify(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    def send(self, body: bytes, at_s: float | None) -> int:
        self._sequence += 1
        sequence = self._sequence
        self.sent += 1
        self.sends.append((self.now(), body))
        if self.weather.lose_doorbells and TriggerEvent.decode(body).reason is Reason.SUBMITTED:
            self.lost += 1
            self.dropped.append(body)
            return sequence
        if self.rng.random() < self.weather.lose:
            self.lost += 1
            self.dropped.append(body)
            return sequence
        if self.weather.forge_doorbells:
            self._forge(body)
        latency = self.rng.uniform(0.002, 0.03) + self.rng.uniform(0, self.weather.delay_s)
        available = max(self.now(), at_s or 0.0) + latency
        self.messages.append(Delivery(sequence, body, available, at_s))
        if self.rng.random() < self.weather.duplicate:
            self.duplicated += 1
            self.messages.append(Delivery(sequence, body, available + self.rng.uniform(0, 2), at_s))
        self._notify()
        return sequence

    def _forge(self, body: bytes) -> None:
        """A doorbell naming an attempt that is not the one its batch committed, delivered just before the real one
        (sent by hand, or by another deployment sharing the namespace): Service Bus is not where a batch's state
        lives, so it may cost a manifest read, never the batch's chunks (a3dd4cd)."""
        event = TriggerEvent.decode(body)
        if event.reason is Reason.SUBMITTED and event.attempt is not None:
            self._sequence += 1
            forged = replace(event, attempt="0bad0bad0bad").encode()
            self.messages.append(Delivery(self._sequence, forged, self.now() + 0.001, None))

    def cancel(self, sequence: int) -> None:
        now = self.now()
        for m in self.messages:
            if m.sequence == sequence and m.scheduled_s is not None and m.scheduled_s > now and m.delivery_count == 0:
                self.messages.remove(m)
                return
        # Due already (delivered or not), cancelled, lost or never issued: the service answers MessageNotFound.
        raise TriggerUnavailable(f"cancel scheduled event {sequence}: MessageNotFound")

    async def take(self, holder: object) -> Delivery:
        """The next deliverable message, locked for `holder` (waits for one)."""
        while True:
            now = self.now()
            self._dead_letter_expired(now)
            if not self.weather.down():
                for m in self.messages:
                    if m.available_s <= now and (m.holder is None or m.locked_until_s <= now):
                        m.delivery_count += 1
                        # Renewed by the host while the function runs, unless renewals fail (then it lapses).
                        m.holder = holder
                        m.locked_until_s = now + (1e9 if self.weather.renewing() else LOCK_S)
                        return m
            waits = [m.available_s if m.holder is None else m.locked_until_s for m in self.messages]
            later = [w - now for w in waits if w > now]
            timeout = min([*later, self.idle_wait_s]) if not self.weather.down() else 0.5
            # At epoch seconds a float resolves about 2e-7 s: a shorter wait would not move `now()`, and the
            # loop would spin at one virtual instant (seen once the look watch changed a schedule).
            timeout = max(timeout, 0.001)
            wake = self._wake
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)

    def complete(self, delivery: Delivery, count: int | None = None) -> bool:
        """Settle a delivery (`count`: its delivery count when taken). False if its lock was lost meanwhile (it
        lapsed, or the message was delivered again): the message stays, as the service keeps it."""
        now = self.now()
        if count is not None and (delivery.delivery_count != count or delivery.locked_until_s <= now):
            return False
        if delivery in self.messages:
            self.messages.remove(delivery)
        return True

    def settle_failed(self, delivery: Delivery) -> None:
        """A complete that failed on the wire: the lock stays until it expires, then the message is delivered
        again."""
        if delivery.holder is not None:
            delivery.locked_until_s = min(delivery.locked_until_s, self.now() + self.rng.uniform(0.0, LOCK_S))
        self._notify()

    def renewals_fail(self) -> bool:
        """The host's lock renewals stop: every held lock lapses within the lock duration. Whether any was held."""
        now, held = self.now(), False
        for m in self.messages:
            if m.holder is not None and m.locked_until_s > now:
                m.locked_until_s = min(m.locked_until_s, now + self.rng.uniform(0.0, LOCK_S))
                held = True
        self._notify()
        return held

    def abandon(self, delivery: Delivery) -> None:
        delivery.holder, delivery.locked_until_s = None, 0.0
        if delivery.delivery_count >= MAX_DELIVERY_COUNT:
            self._dead_letter(delivery)
        self._notify()

    def dead_letters(self) -> list[Delivery]:
        """The dead-letter queue, with every lock expired by now applied."""
        self._dead_letter_expired(self.now())
        return self.dead

    def _dead_letter_expired(self, now: float) -> None:
        # The service dead-letters a message at the abandon or lock expiry that ends its last allowed delivery.
        for m in list(self.messages):
            if m.holder is not None and m.locked_until_s <= now and m.delivery_count >= MAX_DELIVERY_COUNT:
                self._dead_letter(m)

    def _dead_letter(self, delivery: Delivery) -> None:
        if delivery in self.messages:
            self.messages.remove(delivery)
            self.dead.append(delivery)

    def holder_lost(self, holder: object) -> None:
        """The instance holding these locks died: each message returns when its lock would have expired."""
        now = self.now()
        for m in self.messages:
            if m.holder is holder:
                m.locked_until_s = now + self.rng.uniform(0.0, LOCK_S)
        self._notify()


class SimPublisher:
    """The `Publisher` one instance uses: its sends reach the broker unless Service Bus is away."""

    def __init__(self, broker: Broker, timeout_s: float, alive: Callable[[], bool]) -> None:
        self.broker, self.timeout_s, self.alive = broker, timeout_s, alive

    async def _reach(self, what: str) -> None:
        await asyncio.sleep(self.broker.rng.uniform(0.002, 0.02))
        if self.broker.weather.down():
            await asyncio.sleep(self.broker.rng.uniform(0.0, self.timeout_s))
            raise TriggerUnavailable(f"{what}: simulated: Service Bus is unreachable")
        if not self.alive():
            raise asyncio.CancelledError

    async def publish(self, event: TriggerEvent, *, at: datetime | None = None) -> int | None:
        what = f"publish {event.reason.value}"
        await self._reach(what)
        fault = self.broker.weather.send_fault()
        if fault == "refused":
            raise TriggerUnavailable(f"{what}: simulated: the send was refused")
        if fault == "link" and self.broker.rng.random() < 0.5:
            await asyncio.sleep(self.broker.rng.uniform(0.0, self.timeout_s))
            raise TriggerUnavailable(f"{what}: simulated: the link dropped before the send")
        sequence = self.broker.send(event.encode(), None if at is None else at.timestamp())
        if fault == "link":
            await asyncio.sleep(self.broker.rng.uniform(0.0, self.timeout_s))
            raise TriggerUnavailable(f"{what}: simulated: the link dropped after the send, before its answer")
        return sequence if at is not None else None

    async def cancel(self, sequence_number: int) -> None:
        await self._reach("cancel scheduled event")
        self.broker.cancel(sequence_number)

    async def close(self) -> None:
        return None
