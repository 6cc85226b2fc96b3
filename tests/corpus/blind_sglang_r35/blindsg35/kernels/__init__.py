"""Cloud port of SGLang's MLA attention backends to decode context parallelism
(DCP): TRTLLM MLA, CuteDSL MLA, FlashInfer MLA and FlashMLA."""
