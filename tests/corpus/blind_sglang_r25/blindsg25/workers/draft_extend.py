"""Eager draft-extend (fill-draft-KV after verify) paths of the fork's EAGLE worker.

The upstream path (``eagle_worker_common.prepare_for_draft_extend``) plans on
the plan stream; these variants build the batch with
``common.batch_builders`` and plan (or not) at the call site.
"""

from __future__ import annotations

import logging

import torch

from blindsg25.common import planning as plan_utils
from blindsg25.common.batch_builders import (
    build_draft_extend_forward_batch,
    idle_or_graph,
    last_accepted_rows,
)
from blindsg25.common.planning import (
    maybe_preplan_forward_metadata,
    preplan_forward_metadata,
)
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk, is_npu

logger = logging.getLogger(__name__)

_is_npu = is_npu()


class DraftExtendWorker(EagleDraftWorker):
    """EagleDraftWorker whose decode-time draft extend runs eagerly when the
    draft-extend graph cannot be replayed."""

    @property
    def skip_attn_backend_init(self) -> bool:
        # Kept from the pre-marker era: NPU re-inits in forward_extend.
        return not _is_npu

    def _draft_extend_batch(self, batch: ScheduleBatch, batch_result):
        return build_draft_extend_forward_batch(
            self.draft_runner,
            batch,
            batch_result,
            self.speculative_num_draft_tokens,
        )

    def _finish_draft_extend(self, batch_result, logits_output, select_index, *, graph=False):
        if not graph:
            logits_output = last_accepted_rows(logits_output, select_index)
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        next_draft_input = batch_result.next_draft_input
        (
            next_draft_input.topk_p,
            next_draft_input.topk_index,
            next_draft_input.hidden_states,
        ) = (topk_p, topk_index, logits_output.hidden_states)

    def _draft_extend_eager(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + eagle_worker_v2.py _draft_extend_for_decode
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        is_idle, can_run_graph = idle_or_graph(
            self.cuda_graph_runner_for_draft_extend, forward_batch
        )
        if can_run_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
            return self._finish_draft_extend(
                batch_result, logits_output, select_index, graph=True
            )
        if not is_idle:
            # Planned here so the forward does not re-plan the same batch.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_replan_ok(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (marker with replan_equivalent)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        is_idle, can_run_graph = idle_or_graph(
            self.cuda_graph_runner_for_draft_extend, forward_batch
        )
        if can_run_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
            return self._finish_draft_extend(
                batch_result, logits_output, select_index, graph=True
            )
        if not is_idle:
            # draft_runner.attn_backend is exactly what ModelRunner plans with,
            # so a post-pad re-plan is equivalent: opt in.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_via_helper(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (plan moved to a shared helper)
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            preplan_forward_metadata(self.draft_runner.attn_backend, forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_helper_replan(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (shared helper, replan opt-in)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            preplan_forward_metadata(
                self.draft_runner.attn_backend, forward_batch, replan_equivalent=True
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_maybe_helper(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (pre-plan only for unpadded batches)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        planned = maybe_preplan_forward_metadata(
            self.draft_runner.attn_backend, forward_batch
        )
        if not planned:
            logger.debug("draft extend: deferring attention plan to ModelRunner")
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_warm_plan(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/multi_layer_eagle_worker_v2.py _draft_extend_for_decode (pre-plan left unmarked)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if self.plan_stream:
            self.plan_stream.wait_stream(torch.get_device_module(self.device).current_stream())
        with self.plan_stream_ctx:
            if not forward_batch.forward_mode.is_idle():
                # Warms the wrapper workspace on the plan stream; the batch is
                # left unmarked so forward_extend plans the padded batch.
                plan_utils.plan_only(self.draft_runner.attn_backend, forward_batch)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_plan_stream(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan stream)
        # expect: SG106
        if self.plan_stream:
            self.plan_stream.wait_stream(torch.get_device_module(self.device).current_stream())
        with self.plan_stream_ctx:
            forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
            is_idle, can_run_graph = idle_or_graph(
                self.cuda_graph_runner_for_draft_extend, forward_batch
            )
            if not is_idle and not can_run_graph:
                plan_utils.preplan_forward_metadata(
                    self.draft_runner.attn_backend, forward_batch
                )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        if can_run_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
            return self._finish_draft_extend(
                batch_result, logits_output, select_index, graph=True
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_deprecated_kwarg(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker.py (0.5.6) EAGLEWorker.forward_draft_extend_after_decode
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        forward_batch.can_run_dp_cuda_graph = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_via_tp_worker(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: managers/tp_worker.py TpModelWorker.forward_batch_generation(skip_attn_backend_init=True)
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Logits only (is_verify skips sampling); the draft top-k is taken below.
        out = self.draft_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            is_verify=True,
            skip_attn_backend_init=True,
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)

    def _draft_extend_apply_flag(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: model_executor/forward_batch_info.py ForwardBatch.apply_deprecated_skip_attn_backend_init -- path: non-NPU (property True) with DP attention
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            # CUDA path only (property is False on NPU).
            forward_batch.apply_deprecated_skip_attn_backend_init(
                self.skip_attn_backend_init
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_remark(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (marker refreshed after input rewrite) -- path: hot_token_id set (token map) with DP attention
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if forward_batch.forward_mode.is_idle():
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            return self._finish_draft_extend(batch_result, logits_output, select_index)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.hot_token_id is not None:
            forward_batch.input_ids = self.hot_token_id[forward_batch.input_ids]
            # Refresh the plan record after swapping input_ids.
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_remark_fixed(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (marker refreshed, opt-in kept)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if forward_batch.forward_mode.is_idle():
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            return self._finish_draft_extend(batch_result, logits_output, select_index)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.hot_token_id is not None:
            forward_batch.input_ids = self.hot_token_id[forward_batch.input_ids]
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_raw_flag(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (marker set by field)
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.forward_metadata_ready = True
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_stale_check(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: layers/attention/trtllm_mla_backend.py forward_extend backstop, hoisted into the worker
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            self._planned_draft_extend_bs = forward_batch.batch_size
        forward_batch.spec_info.select_index = select_index
        # Guard against a reshaped batch before handing it to the runner.
        if (
            not forward_batch.forward_mode.is_idle()
            and forward_batch.batch_size != self._planned_draft_extend_bs
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            self._planned_draft_extend_bs = forward_batch.batch_size
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, None)
