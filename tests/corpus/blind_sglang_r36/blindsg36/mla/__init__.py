"""Decode context parallelism (DCP) experiments on SGLang's MLA backends
(TRTLLM MLA, FlashInfer MLA wrapper, FlashMLA, CuteDSL MLA)."""
