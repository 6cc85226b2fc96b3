"""Adaptive draft length experiments: per-step batch generators and a controller."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, Sequence

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils.common import require_mlp_sync

from blindsg30.utils import plan_helpers as ph

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


def iter_planned_steps(
    backend: "AttentionBackend", batches: Iterable[ForwardBatch]
) -> Iterator[ForwardBatch]:
    """Yield each non-idle per-step batch already planned and marked."""
    for fb in batches:
        if fb.forward_mode.is_idle():
            continue
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        yield fb


# idiom: speculative/eagle_worker_v2.py draft_forward step loop; generator yields per-step batches with no planning
# expect: clean
def iter_unplanned_steps(batches: Iterable[ForwardBatch]) -> Iterator[ForwardBatch]:
    for fb in ph.skip_idle(batches):
        fb.spec_info.hidden_states = fb.spec_info.hidden_states.contiguous()
        yield fb


class AdaptiveDraftController:
    def __init__(
        self,
        runner: ModelRunner,
        backend: "AttentionBackend",
        lengths: Sequence[int] = (2, 4, 6, 8),
    ):
        self.runner = runner
        self.backend = backend
        self.lengths = sorted(lengths)
        self.accept_ema = 0.5

    # idiom: speculative/adaptive_spec_params.py AdaptiveStepSlot.update; picks a draft length from an EMA of accept rates, no planning or forward
    # expect: clean
    def choose_length(self, accept_rate: float) -> int:
        self.accept_ema = 0.9 * self.accept_ema + 0.1 * accept_rate
        target = self.lengths[-1] * self.accept_ema
        for n in self.lengths:
            if n >= target:
                return n
        return self.lengths[-1]

    # idiom: speculative/eagle_worker_v2.py draft_forward; plan+mark happens inside the iter_planned_steps generator, forward in the consumer loop
    # expect: SG106
    def run_steps(self, batches: Iterable[ForwardBatch]) -> List:
        outs = []
        for fb in iter_planned_steps(self.backend, batches):
            outs.append(self.runner.forward(fb).logits_output)
        return outs

    # idiom: speculative/eagle_worker_v2.py draft_forward; consumer of the unplanned generator lets ModelRunner.forward plan post-pad
    # expect: clean
    def run_steps_lazy(self, batches: Iterable[ForwardBatch]) -> List:
        outs = []
        for fb in iter_unplanned_steps(batches):
            outs.append(self.runner.forward(fb).logits_output)
        return outs

    # idiom: speculative/adaptive_spec_params.py AdaptiveSpeculativeParams.get_steps_for_batch + eagle_worker_v2.EAGLEWorkerV2.draft; candidate loop with continue/break picks the batch, plan+mark, then forward
    # expect: SG106
    def run_adaptive(self, batch_by_len: Dict[int, ForwardBatch], accept_rate: float):
        want = self.choose_length(accept_rate)
        chosen = None
        for n in reversed(self.lengths):
            if n > want:
                continue
            fb = batch_by_len.get(n)
            if fb is None or not fb.forward_mode.is_decode():
                continue
            self.backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
            chosen = fb
            break
        if chosen is None:
            return None
        return self.runner.forward(chosen).logits_output

    # idiom: speculative/adaptive_spec_params.py AdaptiveSpeculativeParams.get_steps_for_batch + eagle_worker_v2.EAGLEWorkerV2.draft; replan_equivalent chosen from require_mlp_sync(), runner backend
    # expect: clean
    def run_adaptive_gated(self, batch_by_len: Dict[int, ForwardBatch], accept_rate: float):
        want = self.choose_length(accept_rate)
        chosen = None
        for n in reversed(self.lengths):
            if n > want:
                continue
            fb = batch_by_len.get(n)
            if fb is None or not fb.forward_mode.is_decode():
                continue
            if ph.runner_replays(self.runner, fb):
                return self.runner.forward(fb).logits_output
            self.runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready(replan_equivalent=require_mlp_sync())
            chosen = fb
            break
        if chosen is None:
            return None
        return self.runner.forward(chosen).logits_output
