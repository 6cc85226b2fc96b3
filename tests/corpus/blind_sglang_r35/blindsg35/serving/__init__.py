"""Storefront serving fork: EAGLE-3 and standalone-draft speculative decoding
on top of SGLang's v2 spec workers, tuned for DP-attention deployments."""
