"""Attention-metadata planning helpers shared by the fork's workers/runners."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


def plan_and_mark(
    backend: Any, forward_batch: ForwardBatch, *, replan_equivalent: bool = False
) -> None:
    """Plan ``forward_batch`` on ``backend`` and record the pre-plan on the batch."""
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)


def plan_only(backend: Any, forward_batch: ForwardBatch) -> None:
    """Warm plan (e.g. on the plan stream); the batch is left unmarked."""
    backend.init_forward_metadata(forward_batch)


def will_pad_for_dp(forward_batch: ForwardBatch) -> bool:
    """True when ModelRunner._forward_raw will run MLP-sync (DP) padding."""
    return forward_batch.global_num_tokens_cpu is not None


def pad_for_dp(model_runner: ModelRunner, forward_batch: ForwardBatch) -> bool:
    """Run ModelRunner's eager batch preparation (DP-attention / MLP-sync
    padding, attn-tp scatter) now instead of inside ModelRunner.forward.

    The batch must then be run with ``run_padded_eager``: ModelRunner.forward
    would pad it a second time.
    """
    model_runner._prepare_eager_forward_batch(forward_batch)
    return will_pad_for_dp(forward_batch)


def run_padded_eager(
    model_runner: ModelRunner,
    forward_batch: ForwardBatch,
    pp_proxy_tensors=None,
):
    """Run a batch the caller already padded: eager runner only, so the batch
    is not padded a second time, then undo the padding on the outputs."""
    ret = model_runner.eager_runner.execute(
        forward_batch, pp_proxy_tensors=pp_proxy_tensors
    )
    if will_pad_for_dp(forward_batch) and model_runner.pp_group.is_last_rank:
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


@dataclass
class PlannedForward:
    """A batch planned on a backend, ready to hand to its runner."""

    runner: ModelRunner
    forward_batch: ForwardBatch
    backend: Any
    replan_equivalent: bool = False

    @classmethod
    def plan(
        cls,
        runner: ModelRunner,
        forward_batch: ForwardBatch,
        backend: Optional[Any] = None,
        *,
        replan_equivalent: bool = False,
    ) -> "PlannedForward":
        backend = backend if backend is not None else runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
        return cls(runner, forward_batch, backend, replan_equivalent)

    def run(self, pp_proxy_tensors=None):
        return self.runner.forward(self.forward_batch, pp_proxy_tensors=pp_proxy_tensors)
