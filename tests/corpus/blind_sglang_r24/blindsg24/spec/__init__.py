"""Fork speculative workers (EAGLE v2, multi-layer, frozen-KV MTP, standalone, DFlash, UNO)."""
