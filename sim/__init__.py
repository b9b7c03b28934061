"""The engine in a deterministic simulation (issue 27): the app's real code in a simulated world under a
seeded scheduler, with faults, checked against invariants. `python -m sim --seeds N`; see RELIABILITY.md."""
