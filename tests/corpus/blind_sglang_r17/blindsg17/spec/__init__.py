"""Speculative draft workers with out-of-forward attention planning."""
