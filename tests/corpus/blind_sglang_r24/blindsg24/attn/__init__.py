"""Fork attention backends (TRT-LLM / cute-dsl / FlashInfer MLA) with DCP tweaks."""
