"""State folded from the event log, and snapshots of it."""
