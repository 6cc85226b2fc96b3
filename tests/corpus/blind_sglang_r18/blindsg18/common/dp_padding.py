"""DP-attention / MLP-sync padding helpers shared by the fork's draft workers.

Under DP attention the model runner pads every forward batch to the
cross-rank token count (``ForwardBatch.prepare_mlp_sync_batch``) before it
decides whether the batch still needs an attention plan. These helpers let
the workers apply that padding themselves, or plan around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.model_runner import ModelRunner


def mlp_sync_padding_pending(forward_batch: ForwardBatch) -> bool:
    """True when the runner will still pad this batch for the DP gather."""
    return forward_batch.global_num_tokens_cpu is not None


def pad_batch_for_dp(forward_batch: ForwardBatch, model_runner: ModelRunner) -> bool:
    """Apply the runner's MLP-sync padding up front.

    Returns whether anything was padded. Idempotent: the runner's own
    ``_prepare_eager_forward_batch`` pads to the same published counts again.
    """
    if forward_batch.global_num_tokens_cpu is None:
        return False
    forward_batch.prepare_mlp_sync_batch(model_runner)
    return True


def plan_and_mark(
    attn_backend: AttentionBackend,
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> None:
    """Plan ``forward_batch`` on ``attn_backend`` and record the pre-plan."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)


def plan_and_mark_replannable(
    attn_backend: AttentionBackend, forward_batch: ForwardBatch
) -> None:
    """Same as :func:`plan_and_mark`, but lets the forward re-plan on a
    shape change (only valid when the forward path plans on this same
    backend object)."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)


def dp_attention_active() -> bool:
    return is_dp_attention_enabled() or get_parallel().attn_dp_enabled


class PrePlanMixin:
    """Mixin for workers that plan the draft batch outside the forward.

    Expects ``self.draft_runner`` (a draft ``ModelRunner``).
    """

    def _preplan(
        self,
        forward_batch: ForwardBatch,
        attn_backend: Optional[AttentionBackend] = None,
    ) -> None:
        backend = attn_backend or self.draft_runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _preplan_if_safe(
        self,
        forward_batch: ForwardBatch,
        attn_backend: Optional[AttentionBackend] = None,
    ) -> bool:
        """Pre-plan only when no MLP-sync padding can reshape the batch later.

        Returns True when the batch was planned and marked; otherwise the
        forward plans it itself, post-pad.
        """
        if require_mlp_sync() or forward_batch.global_num_tokens_cpu is not None:
            return False
        backend = attn_backend or self.draft_runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return True


@dataclass
class DraftStep:
    """One draft forward: the batch, the backend that plans it, its runner."""

    forward_batch: ForwardBatch
    attn_backend: Any
    model_runner: Any
    planned: bool = False
    padded: bool = False
    notes: list = field(default_factory=list)

    def pad(self) -> None:
        self.padded = pad_batch_for_dp(self.forward_batch, self.model_runner)

    def plan(self, *, mark: bool = True) -> None:
        if self.forward_batch.forward_mode.is_idle():
            return
        self.attn_backend.init_forward_metadata(self.forward_batch)
        if mark:
            self.forward_batch.mark_forward_metadata_ready()
        self.planned = True

    def run(self):
        return self.model_runner.forward(self.forward_batch).logits_output
