"""Fork-local speculative decoding extensions layered on SGLang 0.5.23."""
