"""Fork speculative-decoding workers (EAGLE v2, multi-layer EAGLE, frozen-KV MTP)."""
