"""Fork standalone-draft worker (separate small draft model, no hidden states)."""

from __future__ import annotations

import logging

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker
from sglang.srt.utils.common import fast_topk

from blindsg26.common.settings import DraftStepSettings
from blindsg26.spec.batches import init_draft_extend_batch

logger = logging.getLogger(__name__)


class ForkStandaloneDraftWorker(StandaloneDraftWorker):
    def __init__(self, server_args, gpu_id: int, nccl_port: int, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        self.step_settings = DraftStepSettings.from_server_args(server_args)

    def _build(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        return init_draft_extend_batch(
            self.draft_runner,
            batch,
            batch_result,
            self.speculative_num_draft_tokens,
            self.device,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            kv_loc_plan=kv_loc_plan,
        )

    def _publish(self, batch_result, logits_output, select_index):
        probs = torch.softmax(logits_output.next_token_logits[select_index], dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index, nxt.hidden_states = topk_p, topk_index, None

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (pre-plan + mark) in StandaloneDraftWorker; bug only with SGLANG_FORK_PREPLAN_DRAFT_EXTEND=1
    # expect: SG106
    def _draft_extend_for_decode(self, batch: ScheduleBatch, batch_result, *, kv_loc_plan=None):
        forward_batch, select_index = self._build(batch, batch_result, kv_loc_plan)
        if forward_batch.forward_mode.is_idle():
            self.draft_runner.forward(forward_batch)
            return
        if self.step_settings.preplan_draft_extend:
            with self.plan_stream_ctx:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish(batch_result, logits_output, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend, marked only where no DP attention / MLP sync pads the batch (StandaloneDraftWorker)
    # expect: clean
    def _draft_extend_for_decode_dp_safe(self, batch: ScheduleBatch, batch_result, *, kv_loc_plan=None):
        forward_batch, select_index = self._build(batch, batch_result, kv_loc_plan)
        if forward_batch.forward_mode.is_idle():
            self.draft_runner.forward(forward_batch)
            return
        if self.step_settings.preplan_draft_extend:
            with self.plan_stream_ctx:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                if not self.step_settings.pads_for_dp:
                    forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish(batch_result, logits_output, select_index)
