"""Small pipeline-stage objects the rollout loop threads batches through."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, List

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

from blindsg31.rollout.batch_ops import runner_can_replay
from blindsg31.rollout.protocols import BatchStage

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


class PlanStage:
    """Plan attention metadata out of the forward path and mark the batch."""

    def __init__(self, attn_backend, replan_equivalent: bool = False):
        self.attn_backend = attn_backend
        self.replan_equivalent = replan_equivalent

    def __call__(self, forward_batch: ForwardBatch) -> ForwardBatch:
        if forward_batch.forward_mode.is_idle():
            return forward_batch
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_equivalent
        )
        return forward_batch


class PadStage:
    """Run SGLang's DP-attention padding eagerly."""

    def __init__(self, model_runner: "ModelRunner"):
        self.model_runner = model_runner

    def __call__(self, forward_batch: ForwardBatch) -> ForwardBatch:
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.model_runner)
        return forward_batch


class ForwardStage:
    def __init__(self, model_runner: "ModelRunner"):
        self.model_runner = model_runner

    def __call__(self, forward_batch: ForwardBatch):
        return self.model_runner.forward(forward_batch)


class StagePipeline:
    def __init__(self, stages: Iterable[BatchStage]):
        self.stages: List[BatchStage] = list(stages)

    def run(self, forward_batch: ForwardBatch):
        out = forward_batch
        for stage in self.stages:
            out = stage(out)
        return out


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; draft-decode plan + mark + forward expressed as Plan -> Forward stages
# expect: SG106
def build_draft_decode_pipeline_and_run(
    draft_runner: "ModelRunner", draft_attn_backend, forward_batch: ForwardBatch
):
    pipeline = StagePipeline(
        [PlanStage(draft_attn_backend), ForwardStage(draft_runner)]
    )
    return pipeline.run(forward_batch).logits_output


# idiom: model_executor/forward_batch_info.py prepare_mlp_sync_batch; Pad -> Plan -> Forward, the plan sees the padded shapes
# expect: clean
def build_padded_pipeline_and_run(
    draft_runner: "ModelRunner", draft_attn_backend, forward_batch: ForwardBatch
):
    pipeline = StagePipeline(
        [
            PadStage(draft_runner),
            PlanStage(draft_attn_backend),
            ForwardStage(draft_runner),
        ]
    )
    return pipeline.run(forward_batch).logits_output


# idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=True); Plan(replan) -> Forward stages
# expect: clean
def build_replan_pipeline_and_run(
    draft_runner: "ModelRunner", draft_attn_backend, forward_batch: ForwardBatch
):
    stages = [
        PlanStage(draft_attn_backend, replan_equivalent=True),
        ForwardStage(draft_runner),
    ]
    return StagePipeline(stages).run(forward_batch).logits_output


class DraftExtendStage:
    """Draft extend after verify, as one stage (plan, mark, forward)."""

    def __init__(self, draft_runner: "ModelRunner"):
        self.draft_runner = draft_runner
        self.attn_backend = draft_runner.attn_backend

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + eagle_worker_v2.py _draft_extend_for_decode; plans DRAFT_EXTEND_V2 pre-pad, marks, runs the draft forward
    # expect: SG106
    def __call__(self, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode == ForwardMode.DRAFT_EXTEND_V2
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        with forward_context(
            ForwardContext(attn_backend=self.attn_backend),
            forward_batch=forward_batch,
        ):
            return self.draft_runner.forward(forward_batch).logits_output


class VerifyStage:
    """Target verify as one stage (plan, mark, forward)."""

    def __init__(self, target_runner: "ModelRunner"):
        self.target_runner = target_runner

    # idiom: speculative/eagle_worker_common.py run_eagle_verify (metadata_ready_pre_pad); plans TARGET_VERIFY, marks, runs the target forward
    # expect: clean
    def __call__(self, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_target_verify()
        if not runner_can_replay(self.target_runner, forward_batch):
            # Eager verify: plan here so the tree-mask buffers are filled on
            # the plan stream; graph replay plans in its own load_batch.
            self.target_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.target_runner.forward(forward_batch).logits_output
