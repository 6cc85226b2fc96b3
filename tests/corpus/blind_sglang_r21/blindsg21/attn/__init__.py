"""Fork variants of the MLA attention backends (trtllm_mla, cutedsl_mla,
flashinfer_mla) with decode-context-parallel (DCP) changes."""
