"""What one run returns (`Outcome`: its scenario, the invariants it broke, its schedule, what it accepted and
cost) and the error an invariant may raise to end a run at once (`Violation`)."""

from __future__ import annotations

import hashlib
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

    def digest(self) -> str:
        """A fingerprint of the run: its schedule (the trace), what it broke and its virtual time; two runs of a
        seed that differ in any of them differ in it (`python -m sim --digests`)."""
        text = "\n".join([*self.trace, *self.violations, repr(self.virtual_s)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

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
