"""Fork-side extensions for speculative decoding and MLA attention."""
