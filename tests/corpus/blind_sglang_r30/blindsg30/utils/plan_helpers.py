"""Small planning helpers shared by the lab draft workers.

Imported as ``from blindsg30.utils import plan_helpers as ph`` in most places.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.model_runner import ModelRunner


def preplan(backend: "AttentionBackend", forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan ``forward_batch`` out of forward and record the mark."""
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch


def preplan_replannable(
    model_runner: "ModelRunner", forward_batch: ForwardBatch
) -> ForwardBatch:
    """Plan with the runner's own backend, so the forward may re-plan it."""
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return forward_batch


def plan_only(backend: "AttentionBackend", forward_batch: ForwardBatch) -> ForwardBatch:
    backend.init_forward_metadata(forward_batch)
    return forward_batch


def dp_pad(model_runner: "ModelRunner", forward_batch: ForwardBatch) -> bool:
    """Run the forward's own padding step by hand (DP / MLP-sync padding and
    the attn-tp normalization); True when the batch must be unpadded after."""
    model_runner._prepare_eager_forward_batch(forward_batch)
    return forward_batch.global_num_tokens_cpu is not None


def run_eager(
    model_runner: "ModelRunner",
    forward_batch: ForwardBatch,
    padded: bool,
    pp_proxy_tensors: Optional[Any] = None,
):
    """The eager arm of ModelRunner._forward_raw, minus its padding step."""
    ret = model_runner.eager_runner.execute(
        forward_batch, pp_proxy_tensors=pp_proxy_tensors
    )
    if padded:
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


def runner_replays(model_runner: "ModelRunner", forward_batch: ForwardBatch) -> bool:
    """Whether ModelRunner.forward would replay its decode graph for this batch
    (that path loads its own metadata; a pre-plan mark must not be set there)."""
    graph_runner = model_runner.decode_cuda_graph_runner
    return bool(graph_runner and graph_runner.can_run_graph(forward_batch))


def skip_idle(batches: Iterable[ForwardBatch]) -> Iterator[ForwardBatch]:
    for fb in batches:
        if fb.forward_mode.is_idle():
            continue
        yield fb
