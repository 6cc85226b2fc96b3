"""blindsg22: a fork maintainer's speculative-decoding extensions for SGLang 0.5.23.

Subpackages:
    common    shared planning / length helpers and fork config
    spec      speculative workers (EAGLE, multi-layer, standalone, ngram, adaptive, TBO)
    managers  target-verify manager and DP-attention padding helpers
    runner    draft / draft-extend CUDA-graph runner forks
    attn      MLA attention backend forks (trtllm_mla, cutedsl_mla, flashinfer_mla, hybrid, tbo)
"""
