"""Small planning helpers shared by the reliability team's workers.

These wrap the SGLang planning contract: a pre-planner calls
``attn_backend.init_forward_metadata(fb)`` and then records the plan on the
batch with ``fb.mark_forward_metadata_ready()``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Tuple

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


def is_idle_batch(forward_batch: Optional[ForwardBatch]) -> bool:
    return forward_batch is None or forward_batch.forward_mode.is_idle()


def dp_padding_expected(forward_batch: ForwardBatch) -> bool:
    """True when the model runner will MLP-sync pad this batch."""
    return forward_batch.global_num_tokens_cpu is not None


def preplan_forward_batch(
    attn_backend: Any,
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> ForwardBatch:
    if is_idle_batch(forward_batch):
        return forward_batch
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def plan_only(attn_backend: Any, forward_batch: ForwardBatch) -> ForwardBatch:
    """Warm the backend (workspace, kernel selection) without claiming the plan."""
    if not is_idle_batch(forward_batch):
        attn_backend.init_forward_metadata(forward_batch)
    return forward_batch


def pad_for_dp(model_runner: "ModelRunner", forward_batch: ForwardBatch) -> bool:
    """Run the runner's eager-side normalisation (MLP-sync padding) up front."""
    if not dp_padding_expected(forward_batch):
        return False
    model_runner._prepare_eager_forward_batch(forward_batch)
    return True


def run_eager(model_runner: "ModelRunner", forward_batch: ForwardBatch, **kwargs):
    """Drive the eager runner directly on an already-normalised batch."""
    with forward_context(
        ForwardContext(attn_backend=model_runner.attn_backend),
        forward_batch=forward_batch,
    ):
        ret = model_runner.eager_runner.execute(forward_batch, **kwargs)
    if dp_padding_expected(forward_batch):
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


def decode_graph_can_run(graph_runner: Any, forward_batch: ForwardBatch) -> bool:
    return bool(graph_runner is not None and graph_runner.can_run_graph(forward_batch))


def split_microbatches(
    forward_batch: ForwardBatch, chunks: int
) -> List[ForwardBatch]:
    """Shallow views used for the lookahead probe; each keeps its own mark."""
    if chunks <= 1:
        return [forward_batch]
    return [dataclasses.replace(forward_batch) for _ in range(chunks)]


# idiom: eagle_worker_v2.EAGLEWorkerV2._draft_extend_for_decode (plan+mark then draft_runner.forward), fanned out over micro-batches with comprehensions
# expect: SG106
def run_microbatches_preplanned(
    model_runner: "ModelRunner",
    forward_batches: Iterable[ForwardBatch],
) -> List[Any]:
    batches = [fb for fb in forward_batches if not is_idle_batch(fb)]
    planned = [
        preplan_forward_batch(model_runner.attn_backend, fb) for fb in batches
    ]
    return [model_runner.forward(fb).logits_output for fb in planned]


# idiom: eagle_worker_v2.EAGLEWorkerV2._draft_extend_for_decode, micro-batch fan-out that only warms the backend and leaves the batch unmarked
# expect: clean
def run_microbatches_warmed(
    model_runner: "ModelRunner",
    forward_batches: Iterable[ForwardBatch],
) -> List[Any]:
    batches = [fb for fb in forward_batches if not is_idle_batch(fb)]
    warmed = [plan_only(model_runner.attn_backend, fb) for fb in batches]
    return [model_runner.forward(fb).logits_output for fb in warmed]


def forward_and_unwrap(model_runner: "ModelRunner", forward_batch: ForwardBatch, **kw):
    out = model_runner.forward(forward_batch, **kw)
    return out.logits_output, out.can_run_graph


def planned_pair(
    attn_backend: Any, forward_batch: ForwardBatch, can_run_graph: bool
) -> Tuple[ForwardBatch, bool]:
    """prepare_for_draft-style: pre-plan only when no graph will replay."""
    if not can_run_graph and not is_idle_batch(forward_batch):
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_batch, can_run_graph
