"""Speculative-decoding workers (EAGLE / multi-layer EAGLE / frozen-KV MTP /
standalone) with fork-specific scheduling of attention planning."""
