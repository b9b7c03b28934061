"""Keeping a held message invisible while its chunk waits and works.

A message received with a visibility timeout reappears once it passes; a chunk that waits for a place or runs a
slow handler must not be delivered twice meanwhile, so its visibility is extended at 60% of the timeout, under
the message's lock (settling takes the same lock, so an extension never races a delete or a rewrite).

The work runs in the caller's own task; a timer starts an extension only when one is due (a chunk settled within
60% of the timeout, the common case, costs no task and no wait of its own: issue 42). A failed extension cancels
the work and its error is what the caller sees, as before (a sync handler's thread runs on, its call keeping its
place until it returns: `shared.engine.handler_calls`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from shared.store.received import Received, epoch_ms
from shared.store.storage import translated

EXTEND_AT = 0.6  # of the visibility timeout


class _Keeper:
    """The extensions of one held message while its work runs in `task`."""

    def __init__(
        self, item: Received, visibility_s: int, clock: Callable[[], float], extended: Callable[[int], None]
    ) -> None:
        self.item, self.visibility_s, self.clock, self.extended = item, visibility_s, clock, extended
        self.task = asyncio.current_task()
        self.loop = asyncio.get_running_loop()
        self.working = True  # the work has not ended: an extension is still wanted
        self.timer: asyncio.TimerHandle | None = None
        self.extending: asyncio.Task[None] | None = None
        self.failed: Exception | None = None  # an extension's error (it supersedes the work's outcome)
        self.cancelled_work = False  # the work was cancelled because an extension failed

    def arm(self) -> None:
        wait = max(0.1, self.item.received_at + self.visibility_s * EXTEND_AT - self.clock())
        self.timer = self.loop.call_later(wait, self._due)

    def _due(self) -> None:
        self.timer = None
        if self.working:
            self.extending = self.loop.create_task(self._extend())

    async def _extend(self) -> None:
        item = self.item
        try:
            async with item.lock, translated(f"extend visibility of {item.message.id}"):
                if not self.working:
                    return
                updated = await item.queue.update_message(
                    item.message, pop_receipt=item.pop_receipt, visibility_timeout=self.visibility_s
                )
                item.message.pop_receipt = updated.pop_receipt
            item.received_at = self.clock()
            item.visible_at_ms = epoch_ms() + self.visibility_s * 1000
            self.extended(item.visible_at_ms)
        except Exception as e:
            # Storage may have applied it with its answer lost (the SDK's retry then refused: a new pop receipt):
            # hidden till then with nobody holding it. Whoever leaves it for redelivery wakes for then, not before.
            item.visible_at_ms = max(item.visible_at_ms, epoch_ms() + self.visibility_s * 1000)
            self.failed = e
            if self.working and self.task is not None:
                self.cancelled_work = True
                self.task.cancel()
            return
        finally:
            self.extending = None
        if self.working:
            self.arm()

    async def stop(self, *, ended: bool) -> None:
        """The work is over. `ended`: by itself (returned or raised), so an extension under way is let finish
        (its error, if any, is raised); otherwise (cancelled) it is cancelled too."""
        self.working = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        extending = self.extending
        if extending is not None:
            if not ended:
                extending.cancel()
            await asyncio.gather(extending, return_exceptions=True)
        if ended and self.failed is not None:
            raise self.failed


async def keeping_invisible(
    item: Received,
    work: Awaitable[None],
    *,
    visibility_s: int,
    clock: Callable[[], float],
    extended: Callable[[int], None],
) -> None:
    """Run `work`, extending `item`'s visibility until it ends; `extended(visible_at_ms)` after each extension.
    Raises what `work` raised, or what a failed extension raised (the work is then cancelled); cancelled, it
    cancels `work`."""
    keeper = _Keeper(item, visibility_s, clock, extended)
    keeper.arm()
    try:
        await work
    except asyncio.CancelledError:
        if keeper.cancelled_work and _uncancelled():  # cancelled by the failed extension alone: its error
            await keeper.stop(ended=True)
        await keeper.stop(ended=False)
        raise
    except Exception:
        await keeper.stop(ended=True)
        raise
    except BaseException:
        await keeper.stop(ended=False)
        raise
    if keeper.cancelled_work:  # the work swallowed the cancel the failed extension sent it
        _uncancelled()
    await keeper.stop(ended=True)


def _uncancelled() -> bool:
    """Withdraw one cancel request of the current task; whether none is left (no one else cancelled it)."""
    current = asyncio.current_task()
    return current is not None and current.uncancel() == 0
