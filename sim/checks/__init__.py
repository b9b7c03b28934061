"""The checks a run is held to: the invariants during the run (`invariants`, `wakeups`, `progress`, `doorbells`),
the promises to users over the run's records (`promises`, `replays`), what a caller's operation costs and what it
may cost (`costs`, `cost_promises`), and the checks once the run is quiet (`final`)."""
