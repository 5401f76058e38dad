"""sched."""
