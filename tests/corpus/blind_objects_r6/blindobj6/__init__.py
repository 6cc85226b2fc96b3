# SPDX-License-Identifier: Apache-2.0
"""Fork-local speculative-decoding extensions carried on top of vLLM 0.33.0.

The modules mirror the upstream layout:

* ``parallel_drafters``   -- DFlash / DSpark / DFlash2 / XPress derived drafters
* ``ar_drafters``         -- Eagle / MTP / target-dependent AR derived drafters
* ``standalone_drafters`` -- standalone AR (separate small LM) drafters
* ``helper_overrides``    -- drafters that customise the shared metadata helpers
* ``fork_base``           -- fork-local speculator bases predating the helpers
* ``model_states``        -- model states with fork-local ``prepare_attn``
* ``kv_specs``            -- fork KV-cache specs for draft / DSpark layers
* ``mla_decode``          -- FlashInfer MLA decode impls with DCP tweaks

Nothing is imported eagerly: importing this package must not pull in CUDA.
"""

__all__ = [
    "ar_drafters",
    "fork_base",
    "helper_overrides",
    "kv_specs",
    "mla_decode",
    "model_states",
    "parallel_drafters",
    "standalone_drafters",
]
