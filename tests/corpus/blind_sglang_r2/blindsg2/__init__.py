"""Fork-local extensions of SGLang 0.5.23 speculative decoding / model runner."""
