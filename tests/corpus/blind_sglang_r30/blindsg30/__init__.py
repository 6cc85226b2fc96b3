"""Lab fork of SGLang speculative decoding plus production MLA/DCP patches."""
