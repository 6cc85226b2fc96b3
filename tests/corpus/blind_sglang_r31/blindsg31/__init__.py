"""blindsg31: rollout engine + ROCm MLA/DCP port used by the post-training stack.

Two halves that grew up in different teams:

* ``rollout``     -- the RL post-training team's rollout engine that drives
                     SGLang speculative decoding (EAGLE / frozen-KV MTP) between
                     policy-weight syncs.
* ``mla_port``    -- the accelerator vendor's port of the MLA attention
                     backends under decode context parallelism (DCP).
* ``spec_bridge`` -- glue that ports SGLang's spec-v2 draft workers onto the
                     vendor backends (ROCm graph fallbacks, DP-attention guards).
"""
