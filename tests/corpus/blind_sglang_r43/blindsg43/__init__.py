"""Fork-side extensions of SGLang's speculative decoding runtime.

Graph-runner fallbacks, overlap-scheduled draft/verify workers and the MLA
attention backends used under decode context parallelism.
"""
