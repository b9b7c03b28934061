"""What one run returns (`Outcome`: its scenario, the invariants it broke, its schedule, what it accepted and
cost) and the error an invariant may raise to end a run at once (`Violation`)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.scenario import Scenario


class Violation(AssertionError):
    """An invariant broken during a run."""


@dataclass
class Outcome:
    """What one run did, and what it broke."""

    seed: int
    scenario: Scenario
    violations: list[str]
    trace: list[str]
    virtual_s: float
    accepted: int
    items: int
    transactions: int
    features: frozenset[str] = frozenset()  # the doors this seed opened (`sim.platform.FEATURES`)

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self) -> str:
        lines = [
            f"seed {self.seed}: {'ok' if self.ok else 'FAILED'} ({self.virtual_s:.0f} virtual s, "
            f"{self.accepted} batches / {self.items} items accepted, {self.transactions} storage transactions)"
        ]
        lines.append(self.scenario.describe())
        if not self.ok:
            lines.append("violations:")
            lines.extend(f"  - {v}" for v in self.violations)
            lines.append("schedule (last 60 events):")
            lines.extend(f"  {t}" for t in self.trace[-60:])
        return "\n".join(lines)
