"""Draft-extend launchers (base + per-deployment subclasses) and the
free-function launch recipes the step driver picks from."""

from __future__ import annotations

import copy

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg28.platform import planning
from blindsg28.platform.planning import pad_for_dp, preplan, run_eager


class BaseDraftLauncher:
    """Launches DRAFT_EXTEND_V2 batches on a draft ModelRunner."""

    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner
        self.launched = 0

    # idiom: eagle_worker_common.prepare_for_draft_extend, twist: base launcher pads first, plans the padded batch, then runs the eager runner directly
    # expect: clean
    def launch(self, forward_batch: ForwardBatch):
        pad_for_dp(forward_batch, self.model_runner)
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self.launched += 1
        return run_eager(self.model_runner, forward_batch)


class PrePlannedDraftLauncher(BaseDraftLauncher):
    """Plans early so the host work overlaps the previous step."""

    # idiom: eagle_worker_common.prepare_for_draft_extend, twist: subclass overrides the one launch method to plan+mark before ModelRunner.forward pads
    # expect: SG106
    def launch(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self.launched += 1
        return self.model_runner.forward(forward_batch)


class ReplanSafeDraftLauncher(BaseDraftLauncher):
    """Plans early but lets the forward re-plan a reshaped batch."""

    # idiom: eagle_worker_common.prepare_for_draft_extend, twist: subclass override marks with replan_equivalent=True on the runner's own backend
    # expect: clean
    def launch(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self.launched += 1
        return self.model_runner.forward(forward_batch)


# idiom: forward_batch_info.ForwardBatch.prepare_mlp_sync_batch + eager_runner.EagerRunner.execute, twist: plan and mark, then the explicit DP pad, then the eager runner
# expect: SG106
def plan_pad_execute(runner: ModelRunner, forward_batch: ForwardBatch):
    if not forward_batch.forward_mode.is_idle():
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    forward_batch.prepare_mlp_sync_batch(runner)
    out = runner.eager_runner.execute(forward_batch)
    forward_batch.post_forward_mlp_sync_batch(out)
    return out


# idiom: forward_batch_info.ForwardBatch.mark_forward_metadata_ready, twist: the mark is placed after the pad, but the plan itself still came before it
# expect: SG106
def plan_pad_mark_execute(runner: ModelRunner, forward_batch: ForwardBatch):
    idle = forward_batch.forward_mode.is_idle()
    if not idle:
        runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.prepare_mlp_sync_batch(runner)
    if not idle:
        forward_batch.mark_forward_metadata_ready()
    out = runner.eager_runner.execute(forward_batch)
    forward_batch.post_forward_mlp_sync_batch(out)
    return out


# idiom: forward_batch_info.ForwardBatch.needs_forward_metadata_init, twist: replan_equivalent=True is passed, but only after the pad, so the plan record already holds the padded shape
# expect: SG106
def plan_pad_mark_replannable_execute(runner: ModelRunner, forward_batch: ForwardBatch):
    idle = forward_batch.forward_mode.is_idle()
    if not idle:
        runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.prepare_mlp_sync_batch(runner)
    if not idle:
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    out = runner.eager_runner.execute(forward_batch)
    forward_batch.post_forward_mlp_sync_batch(out)
    return out


# idiom: forward_batch_info.ForwardBatch.prepare_mlp_sync_batch + eager_runner.EagerRunner.execute, twist: pad first, then plan and mark the padded batch
# expect: clean
def pad_plan_mark_execute(runner: ModelRunner, forward_batch: ForwardBatch):
    forward_batch.prepare_mlp_sync_batch(runner)
    if not forward_batch.forward_mode.is_idle():
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    out = runner.eager_runner.execute(forward_batch)
    forward_batch.post_forward_mlp_sync_batch(out)
    return out


# idiom: forward_batch_info.ForwardBatch.needs_forward_metadata_init, twist: pad, plan, then mark with replan_equivalent=True (plan record equals the padded shape)
# expect: clean
def pad_plan_mark_replannable_execute(runner: ModelRunner, forward_batch: ForwardBatch):
    forward_batch.prepare_mlp_sync_batch(runner)
    if not forward_batch.forward_mode.is_idle():
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    out = runner.eager_runner.execute(forward_batch)
    forward_batch.post_forward_mlp_sync_batch(out)
    return out


# idiom: model_runner.ModelRunner._forward_raw split into fork helpers, twist: plan (planning.preplan), pad (planning.pad_for_dp) and launch (planning.run_eager) all live in another module
# expect: SG106
def orchestrate_with_helpers(runner: ModelRunner, forward_batch: ForwardBatch):
    if planning.graph_can_run(runner, forward_batch):
        return runner.forward(forward_batch)
    preplan(runner.attn_backend, forward_batch)
    pad_for_dp(forward_batch, runner)
    return run_eager(runner, forward_batch)


# idiom: prefill_cuda_graph_runner._prepare_forward_metadata_for_replay (plans a shallow copy.copy view), twist: the fork dry-plans a shallow copy and marks the copy, leaving the real batch unmarked
# expect: clean
def dry_plan_then_forward(runner: ModelRunner, forward_batch: ForwardBatch):
    if planning.graph_can_run(runner, forward_batch) or forward_batch.forward_mode.is_idle():
        return runner.forward(forward_batch)
    view = copy.copy(forward_batch)
    runner.attn_backend.init_forward_metadata(view)
    view.mark_forward_metadata_ready()
    # forward_batch itself carries no mark: the forward plans the padded batch
    return runner.forward(forward_batch)
