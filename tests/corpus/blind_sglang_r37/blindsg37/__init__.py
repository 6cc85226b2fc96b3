"""Fork-local speculative decoding pieces (draft services, DCP MLA backends).

Tracks SGLang 0.5.23 / FlashInfer 0.7.4 module paths.
"""
