"""blindsg20: out-of-tree SGLang extensions (speculative decoding + MLA/DCP).

The package layers fork-specific behaviour on top of upstream SGLang classes:

* ``attn``   -- MLA attention backends (trtllm-gen, cute-dsl, FlashInfer MLA)
                with the fork's decode-context-parallel (DCP) handling.
* ``runner`` -- ModelRunner / EagerRunner / graph-runner overrides.
* ``spec``   -- EAGLE / multi-layer EAGLE draft workers.
* ``common`` -- planning, flag and DCP length helpers shared by the above.
"""

__all__ = ["attn", "common", "runner", "spec"]
