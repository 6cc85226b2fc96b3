"""Decode-context-parallel ports of the TRT-LLM, FlashInfer-MLA and CuteDSL MLA backends."""
