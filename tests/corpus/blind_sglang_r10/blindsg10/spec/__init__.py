"""Speculative-decoding workers (EAGLE / MTP / standalone) used by the fork."""
