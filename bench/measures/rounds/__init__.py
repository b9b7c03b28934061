"""The app, peer (a') and the raw loop in interleaved rounds: message rate and CPU per message (`bench.rounds`)."""
