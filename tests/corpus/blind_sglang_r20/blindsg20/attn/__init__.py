"""Fork MLA attention backends (trtllm-gen / cute-dsl / FlashInfer MLA)."""
