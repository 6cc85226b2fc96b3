"""Speculative-decoding worker overrides (EAGLE v2, multi-layer EAGLE, frozen-KV MTP)."""
