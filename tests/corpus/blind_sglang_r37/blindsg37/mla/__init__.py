"""Decode-context-parallel (DCP) work on the MLA attention backends:
TRTLLM MLA, the FlashInfer MLA wrapper, FlashMLA and CuteDSL MLA."""
