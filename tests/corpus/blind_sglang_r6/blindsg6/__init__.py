"""Blind labelled corpus (round 6) of SGLang-style speculative-decoding code."""
