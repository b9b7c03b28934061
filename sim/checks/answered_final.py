"""*A final status once answered never changes* (issue 37: "a batch's final status never changes once stamped",
as a caller sees it). A client that reads a batch's status route (`GET /api/batches/{id}`: the pollers, the page
readers of `sim.doors.callers`) and is answered a final status (`completed`, `cancelled`...) is told the batch is
done: every later answer of the route, a cancel's answer, and the route's answer once the run is quiet (which
`sim.checks.promises.after_run` holds to the stamp) must say the same. The stamp check
(`sim.checks.promises.Promises.check_stamps`) compares stamps with stamps only; a route that answered a final
status from the records before the stamp (a cancel that read the batch before its last record then ends it, and
it is stamped `cancelled`: the caller saw `completed`, then `cancelled`) broke no stamp.

`saw` is called with each answer as it comes; `after_run` with the route's answer once the run is quiet
(`sim.checks.final`). The world keeps one `AnsweredFinal` (`World.answered_final`).
"""

from __future__ import annotations

from typing import Any

from shared.ops.status import FINAL

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

CHANGED = "once answered final"  # what a violation of this check says (the mutants' `expect`)


class AnsweredFinal:
    def __init__(self, world: World) -> None:
        self.world = world
        self.first: dict[str, tuple[str, float, str]] = {}  # batch id -> (final status first answered, when, by what)

    def saw(self, batch_id: str, status: int, body: Any, door: str) -> None:
        """An answer of `door` about the batch: the first final one is kept; each later one must agree with it."""
        said = body.get("status") if status == 200 and isinstance(body, dict) else None
        if said in FINAL:
            self._agrees(batch_id, str(said), door)

    def after_run(self, batch_id: str, status: dict[str, Any]) -> None:
        """The route's answer after the run agrees with the first final answer a caller had (and so does the stamp:
        `sim.checks.promises.after_run` holds it to the route, and reports a stamp that differs itself)."""
        if batch_id in self.first:
            self._agrees(batch_id, str(status["status"]), "the status route after the run")

    def _agrees(self, batch_id: str, said: str, door: str) -> None:
        world = self.world
        first = self.first.setdefault(batch_id, (said, world.now_s(), door))
        if first[0] != said:
            world.violate(
                f"batch {batch_id[:8]} {CHANGED} {first[0]} ({first[2]} at {first[1]:.3f} s) is {said} ({door})"
            )
            self.first[batch_id] = (said, world.now_s(), door)  # one violation per change
