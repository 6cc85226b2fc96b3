"""ModelRunner / EagerRunner extensions used by the fork's speculative workers.

The fork overlaps attention planning with the previous step's sampling by
planning on a side stream, then runs the forward on the compute stream.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.model_executor.runner.eager_runner import EagerRunner

from blindsg14.spec.plan_utils import preplan_and_seal


class OverlapPlanModelRunner(ModelRunner):
    """ModelRunner with entry points that accept a pre-planned batch."""

    @property
    def _plan_ctx(self):
        stream_ctx = getattr(self, "plan_stream_ctx", None)
        return stream_ctx if stream_ctx is not None else contextlib.nullcontext()

    # expect: SG106
    def forward_preplanned(self, forward_batch: ForwardBatch):
        with self._plan_ctx:
            self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch)

    # expect: clean
    def forward_preplanned_replannable(self, forward_batch: ForwardBatch):
        with self._plan_ctx:
            self.attn_backend.init_forward_metadata(forward_batch)
        # Same backend the forward plans on: a post-pad re-plan is equivalent.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.forward(forward_batch)

    # expect: clean
    def forward_prepadded(self, forward_batch: ForwardBatch):
        # Mirror _forward_raw's eager branch, but plan after the padding.
        self._prepare_eager_forward_batch(forward_batch)
        with self._plan_ctx:
            self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        ret = self.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret


# expect: SG106
def forward_with_plan_overlap(
    model_runner: ModelRunner, forward_batch: ForwardBatch, plan_stream_ctx: Any
):
    with plan_stream_ctx:
        preplan_and_seal(model_runner.attn_backend, forward_batch)
    return model_runner.forward(forward_batch).logits_output


# expect: clean
def refine_block_repeatedly(
    model_runner: ModelRunner,
    forward_batch: ForwardBatch,
    num_steps: int,
    update_inputs: Callable[[ForwardBatch, Any], bool],
):
    """Diffusion-style refinement over a fixed canvas.

    The first forward plans inside ModelRunner (after its own DP padding); the
    canvas keeps its shape, so later forwards reuse that plan.
    """
    out = model_runner.forward(forward_batch)
    # The plan now held by the backend was made for the padded canvas, and
    # every later forward pads it identically.
    forward_batch.mark_forward_metadata_ready()
    for _ in range(num_steps):
        if update_inputs(forward_batch, out.logits_output):
            break
        out = model_runner.forward(forward_batch)
    return out.logits_output


class PreplannedEagerRunner(EagerRunner):
    """Eager runner that can take a batch planned by the scheduler thread."""

    # expect: SG106
    def execute_preplanned(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        model_runner = self.model_runner
        if not forward_batch.forward_mode.is_idle():
            model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        # Same normalization _forward_raw applies before handing us the batch.
        model_runner._prepare_eager_forward_batch(forward_batch)
        return self.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: clean
    def execute_planned_after_normalize(
        self, forward_batch: ForwardBatch, pp_proxy_tensors=None
    ):
        model_runner = self.model_runner
        model_runner._prepare_eager_forward_batch(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
