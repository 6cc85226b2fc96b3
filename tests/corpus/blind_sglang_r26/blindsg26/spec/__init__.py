"""Fork subclasses of SGLang's speculative workers (EAGLE v2, multi-layer EAGLE,
frozen-KV MTP, DFlash, standalone, NGRAM)."""
