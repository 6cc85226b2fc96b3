"""Fork speculative workers (EAGLE v2, multi-layer EAGLE, standalone, ngram)."""
