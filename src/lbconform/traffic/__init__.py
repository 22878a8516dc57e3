"""Traffic the harness sends: connection fleets, request loops, and what became of each."""
