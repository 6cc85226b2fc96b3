"""Shared pre-planning helpers for the draft workers in this package.

The draft workers plan attention metadata outside ``ModelRunner.forward`` in a
few places (multi-step draft decode, draft extend, plan-stream overlap). The
helpers here keep the planning call and the readiness mark in one place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DraftPlanPolicy:
    """How a worker marks a batch it planned itself."""

    mark_after_plan: bool = True
    replan_equivalent: bool = False
    tag: str = "draft"


MULTI_STEP_DECODE_POLICY = DraftPlanPolicy(
    mark_after_plan=True, replan_equivalent=False, tag="draft_decode"
)
DRAFT_EXTEND_POLICY = DraftPlanPolicy(
    mark_after_plan=True, replan_equivalent=True, tag="draft_extend"
)
LEGACY_DRAFT_EXTEND_POLICY = DraftPlanPolicy(
    mark_after_plan=True, replan_equivalent=False, tag="draft_extend_legacy"
)


@dataclass
class PlannedDraftBatch:
    forward_batch: ForwardBatch
    can_run_cuda_graph: bool
    planned: bool = False
    extras: Dict[str, Any] = field(default_factory=dict)


def plan_and_mark(
    attn_backend: "AttentionBackend",
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> ForwardBatch:
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def plan_only(attn_backend: "AttentionBackend", forward_batch: ForwardBatch) -> bool:
    if forward_batch.forward_mode.is_idle():
        return False
    attn_backend.init_forward_metadata(forward_batch)
    return True


def pad_for_mlp_sync(forward_batch: ForwardBatch, model_runner: "ModelRunner") -> bool:
    """Apply the DP-attention padding the eager forward would apply."""
    if forward_batch.global_num_tokens_cpu is None:
        return False
    forward_batch.prepare_mlp_sync_batch(model_runner)
    return True


def mark_kwargs_for(policy: DraftPlanPolicy) -> Dict[str, Any]:
    return {"replan_equivalent": policy.replan_equivalent}


def draft_extend_select_index(
    accept_lens: torch.Tensor, num_draft_tokens: int, device: torch.device
) -> torch.Tensor:
    bs = accept_lens.shape[0]
    return (
        torch.arange(0, bs * num_draft_tokens, num_draft_tokens, device=device)
        + accept_lens
        - 1
    )


def dp_attention_active() -> bool:
    return bool(get_parallel().attn_dp_enabled)


class PrePlanningRunnerMixin:
    """Base for small helpers that own a runner and plan for it.

    Subclasses choose whether the pre-plan may be redone on the forward path.
    """

    REPLAN_EQUIVALENT: bool = False

    def __init__(self, model_runner: "ModelRunner"):
        self.model_runner = model_runner
        self.attn_backend = model_runner.attn_backend

    def _plan_for_forward(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.REPLAN_EQUIVALENT
        )

    def _select_rows(self, logits_output, select_index: Optional[torch.Tensor]):
        if select_index is None:
            return logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output


class DraftExtendRunner(PrePlanningRunnerMixin):
    """Eager draft-extend on the draft runner (legacy mark semantics)."""

    # expect: SG106
    def run_extend(self, forward_batch: ForwardBatch, select_index=None):
        self._plan_for_forward(forward_batch)
        out = self.model_runner.forward(forward_batch)
        return self._select_rows(out.logits_output, select_index)


class SharedBackendDraftExtendRunner(PrePlanningRunnerMixin):
    """Draft-extend runner for drafts that share the runner's backend object."""

    REPLAN_EQUIVALENT = True

    # expect: clean
    def run_extend(self, forward_batch: ForwardBatch, select_index=None):
        self._plan_for_forward(forward_batch)
        out = self.model_runner.forward(forward_batch)
        return self._select_rows(out.logits_output, select_index)
