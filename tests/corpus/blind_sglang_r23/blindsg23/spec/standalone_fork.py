"""Standalone (small draft model) draft pass, one forward per call, with the
fork's phase timing and plan-stream overlap."""

from __future__ import annotations

import contextlib

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch
from sglang.srt.speculative.spec_utils import get_plan_stream
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker
from sglang.srt.utils.common import fast_topk

from blindsg23.common.config import SpecForkConfig
from blindsg23.common.plan_helpers import maybe_log_shapes, phase_timer


class StandaloneDraftFork(StandaloneDraftWorker):
    def _fork_init(self):
        self.fork_cfg = SpecForkConfig.from_runtime()
        if self.fork_cfg.overlap_plan_stream:
            self._plan_stream, self._plan_stream_ctx = get_plan_stream(self.device)
        else:
            self._plan_stream, self._plan_stream_ctx = None, contextlib.nullcontext()

    def _standalone_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        if not hasattr(self, "fork_cfg"):
            self._fork_init()
        batch.input_ids = batch.spec_info.topk_index.flatten()
        return ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )

    def _join_plan_stream(self):
        if self._plan_stream is not None:
            torch.cuda.current_stream().wait_stream(self._plan_stream)

    # idiom: speculative/standalone_worker_v2.py StandaloneDraftWorker (EagleDraftWorker.draft, plan on plan stream)
    # expect: SG106
    @torch.no_grad()
    @phase_timer("standalone.draft_once")
    def draft_once(self, batch: ScheduleBatch):
        forward_batch = self._standalone_batch(batch)
        maybe_log_shapes(self.fork_cfg.log_draft_shapes, "standalone", forward_batch)
        backend = self.draft_runner.attn_backend
        with self._plan_stream_ctx:
            if not forward_batch.forward_mode.is_idle():
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        self._join_plan_stream()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return fast_topk(logits_output.next_token_logits, self.topk, dim=-1)

    # idiom: speculative/standalone_worker_v2.py StandaloneDraftWorker + forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=True)
    # expect: clean
    @torch.no_grad()
    @phase_timer("standalone.draft_once_replannable")
    def draft_once_replannable(self, batch: ScheduleBatch):
        forward_batch = self._standalone_batch(batch)
        maybe_log_shapes(self.fork_cfg.log_draft_shapes, "standalone", forward_batch)
        backend = self.draft_runner.attn_backend
        with self._plan_stream_ctx:
            if not forward_batch.forward_mode.is_idle():
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self._join_plan_stream()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return fast_topk(logits_output.next_token_logits, self.topk, dim=-1)
