"""Speculative decoding workers (EAGLE / MTP variants) maintained in this fork."""
