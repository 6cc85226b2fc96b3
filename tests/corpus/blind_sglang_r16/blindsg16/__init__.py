"""Out-of-tree speculative-decoding and DCP MLA extensions for SGLang.

Sub-packages:
  * ``runtime`` -- model-runner helpers that pre-plan attention metadata
  * ``spec``    -- EAGLE / multi-layer EAGLE / frozen-KV MTP draft workers
  * ``attn``    -- MLA attention backends for decode context parallelism
"""

__all__ = ["attn", "spec", "runtime"]
