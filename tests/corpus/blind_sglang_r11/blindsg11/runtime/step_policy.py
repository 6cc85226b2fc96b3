"""Per-algorithm pre-plan policies for the draft-extend forward."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Dict

from sglang.srt.model_executor.forward_batch_info import ForwardBatch


@dataclass(frozen=True)
class PrePlanPolicy:
    enabled: bool = True
    # Whether the forward path may re-plan after DP padding (see
    # ForwardBatch.mark_forward_metadata_ready).
    replan_equivalent: bool = True

    def apply(self, attn_backend, forward_batch: ForwardBatch) -> bool:
        if not self.enabled or forward_batch.forward_mode.is_idle():
            return False
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_equivalent
        )
        return True


DEFAULT_PREPLAN = PrePlanPolicy()
# The DSA indexer cannot rebuild its deep_gemm schedule on a DP-padded batch
# (#27091), so its mark must not opt into the post-pad re-plan.
DSA_PREPLAN = dataclasses.replace(DEFAULT_PREPLAN, replan_equivalent=False)
NO_PREPLAN = dataclasses.replace(DEFAULT_PREPLAN, enabled=False)


class PrePlanRegistry:
    _POLICIES: ClassVar[Dict[str, PrePlanPolicy]] = {
        "eagle": DEFAULT_PREPLAN,
        "eagle3": DEFAULT_PREPLAN,
        "dsa_mtp": DSA_PREPLAN,
        "standalone": NO_PREPLAN,
    }

    @classmethod
    def for_algorithm(cls, name: str) -> PrePlanPolicy:
        return cls._POLICIES.get(name, DEFAULT_PREPLAN)
