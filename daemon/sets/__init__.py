"""Samples into task sets: their tallies, aggregation of short-lived tasks, the
writer of each checkpoint, the object copies the sets name, and retention."""
