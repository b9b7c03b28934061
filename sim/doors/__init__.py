"""The doors callers open in the simulated world: the HTTP API's callers (`callers`: submit, poll, export, cancel,
replay), bodies and requests that must be refused (`malformed`), the `replay` family's replays and what each
promises its caller (`replayers`, `replay_time`, `replay_rings`, `second_parks`), and the notice drills that kill a
sending instance (`notice_drills`)."""
