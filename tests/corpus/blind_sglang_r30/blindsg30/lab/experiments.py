"""Experiment harness: one draft forward per call, with planning knobs taken
from the experiment configs, closures, decorators and legacy call forms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg30.lab import configs as C
from blindsg30.utils import plan_helpers as ph
from blindsg30.utils.timing import log_step, timed_step

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class SpecExperimentRunner:
    EXPERIMENT = "tree_v1"

    def __init__(self, draft_runner: ModelRunner, draft_attn_backend: "AttentionBackend"):
        self.draft_runner = draft_runner
        self.draft_attn_backend = draft_attn_backend
        self.cfg = C.load_experiment(self.EXPERIMENT)
        self._mark_kwargs: Dict[str, Any] = {"replan_equivalent": False}
        self._mark_kwargs_v2: Dict[str, Any] = C.mark_kwargs("tree_v2")
        self._fwd_kwargs: Dict[str, Any] = C.forward_kwargs(self.EXPERIMENT)

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft; plan+mark, then the forward runs inside a local closure
    # expect: SG106
    def run_with_closure(self, forward_batch: ForwardBatch):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        def _go():
            return self.draft_runner.forward(forward_batch).logits_output

        return _go()

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft; closure plans without marking, so the forward re-plans after padding
    # expect: clean
    def run_with_closure_planner(self, forward_batch: ForwardBatch):
        def _plan_and_go():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            return self.draft_runner.forward(forward_batch).logits_output

        return _plan_and_go()

    # idiom: sglang-0.5.6 speculative/eagle_worker.py forward_draft_extend_after_decode; legacy skip_attn_backend_init=True, mapped onto the mark
    # expect: SG106
    def run_legacy_skip(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output
        return logits

    # idiom: sglang-0.5.6 speculative/eagle_worker.py forward_draft_extend_after_decode; legacy kwarg passed as False, so no mark is set
    # expect: clean
    def run_legacy_skip_false(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=False
        ).logits_output

    # idiom: sglang-0.5.6 eagle_worker.py draft(); skip_attn_backend_init travels as **kwargs built from the tree_v1 nested-dict config
    # expect: SG106
    def run_with_cfg_kwargs(self, forward_batch: ForwardBatch):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(forward_batch, **self._fwd_kwargs).logits_output

    # idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready; mark kwargs dict set in __init__ (replan_equivalent False)
    # expect: SG106
    def run_with_mark_kwargs(self, forward_batch: ForwardBatch):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(**self._mark_kwargs)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready; mark kwargs from the tree_v2 config (replan_equivalent True), runner backend
    # expect: clean
    def run_with_mark_kwargs_v2(self, forward_batch: ForwardBatch):
        if not ph.runner_replays(self.draft_runner, forward_batch):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self._mark_kwargs_v2)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready; flag read from a SimpleNamespace experiment config (tree_v1: False)
    # expect: SG106
    def run_with_ns_flag(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.cfg.planning.replan_equivalent
        )
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: model_executor/forward_batch_info.py apply_deprecated_skip_attn_backend_init called directly after planning
    # expect: SG106
    def run_apply_deprecated(self, forward_batch: ForwardBatch):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.apply_deprecated_skip_attn_backend_init(True)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft under a functools.wraps timing decorator
    # expect: SG106
    @timed_step("draft")
    def run_decorated(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_utils.py eagle_prepare_for_verify non-graph note; decorated step that leaves planning to the forward
    # expect: clean
    @log_step
    @timed_step("draft_lazy")
    def run_decorated_lazy(self, forward_batch: ForwardBatch):
        return self.draft_runner.forward(forward_batch).logits_output
