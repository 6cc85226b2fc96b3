"""Fork-local extensions to SGLang speculative decoding, DP attention and
decode context parallel (DCP) MLA backends."""
