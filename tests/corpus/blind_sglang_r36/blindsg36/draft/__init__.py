"""Speculative decoding variants (EAGLE chain / tree, lookahead -> EAGLE verify,
speculative prefill, adaptive step counts) on SGLang with DP attention."""
