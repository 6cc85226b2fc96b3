"""Fork subclasses of SGLang's MLA attention backends (TRTLLM MLA, cute-dsl MLA,
FlashInfer MLA) and kernel launch helpers."""
