"""Wake latency after idle: submissions at the same moments for every system, first item and batch done."""
