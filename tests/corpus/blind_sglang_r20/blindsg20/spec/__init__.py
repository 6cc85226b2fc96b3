"""Fork EAGLE draft workers and speculative helpers."""
