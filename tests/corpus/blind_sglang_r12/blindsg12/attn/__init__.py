"""Fork extensions for SGLang speculative decoding (blind corpus 12)."""
