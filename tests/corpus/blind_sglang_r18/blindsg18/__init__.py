"""Fork-local speculative decoding and MLA attention extensions on top of SGLang."""
