"""End to end on the local executor."""
