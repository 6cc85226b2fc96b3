"""Kestrel accelerator integration layer for SGLang.

Vendor attention backends (MLA family, FlashInfer wrappers), vendor
speculative workers (EAGLE v2 / MTP) and the parallel-config glue that ties
them to SGLang's server args and runtime context.
"""

KESTREL_PLUGIN_NAME = "kestrel"
