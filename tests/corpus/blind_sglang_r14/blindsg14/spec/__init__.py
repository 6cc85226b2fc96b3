"""Speculative-decoding workers (EAGLE / MTP / standalone forks)."""
