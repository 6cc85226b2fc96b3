"""blindsg41: a functional-style fork layer over SGLang 0.5.23 speculative
decoding (EAGLE / MTP / standalone draft) and the decode-context-parallel MLA
backends (FlashMLA, TRT-LLM MLA, cute-dsl MLA, FlashInfer MLA)."""
