"""Fork EAGLE v2 orchestrator: target prefill / verify with plan-stream planning."""

from __future__ import annotations

import logging

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch
from sglang.srt.speculative.eagle_utils import eagle_prepare_for_verify, eagle_sample
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.spec_utils import draft_tp_context

logger = logging.getLogger(__name__)


class ForkEAGLEWorkerV2(EAGLEWorkerV2):
    # ---------------------------------------------------------------- helpers
    def _target_capture_mode(self) -> CaptureHiddenMode:
        return (
            CaptureHiddenMode.NULL
            if self.speculative_algorithm.is_standalone()
            else CaptureHiddenMode.FULL
        )

    def _join_plan_stream(self) -> None:
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )

    def _finish_prefill(self, batch, batch_output, forward_batch, on_publish):
        batch_output.new_seq_lens = batch.seq_lens
        if on_publish is not None:
            on_publish(batch_output.new_seq_lens)
        if self._draft_worker is None:
            return batch_output
        with draft_tp_context(self.draft_worker.parallel_layout):
            batch_output.next_draft_input = self.draft_worker._draft_extend_for_prefill(
                batch,
                batch_output.logits_output.hidden_states,
                batch_output.next_token_ids,
                batch_output.logits_output.mm_input_embeds,
                kv_loc_plan=forward_batch.kv_loc_plan,
            )
        return batch_output

    def _finish_verify(self, batch, verify_input, batch_output):
        predict, accept_lens, accept_index = eagle_sample(
            verify_input,
            batch,
            batch_output.logits_output,
            None,
            watermark_state=self.target_worker.model_runner.watermark_state,
        )
        batch_output.next_token_ids = predict
        batch_output.accept_lens = accept_lens
        batch_output.new_seq_lens = batch.seq_lens + accept_lens
        return batch_output

    # ------------------------------------------------------------------ cases
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EAGLEWorkerV2._forward_prefill_batch with the target prefill planned on the plan stream and marked
    # expect: SG106
    def _forward_prefill_batch(
        self, batch, on_publish=None, pp_proxy_tensors=None, coordination_plan=None
    ):
        assert coordination_plan is None, "fork prefill path is uncoordinated"
        model_runner = self.target_worker.model_runner
        forward_batch = ForwardBatch.init_new(
            batch,
            model_runner,
            capture_hidden_mode=self._target_capture_mode(),
            return_hidden_states_before_norm=False,
        )
        if not forward_batch.forward_mode.is_idle():
            with self.plan_stream_ctx:
                model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            self._join_plan_stream()
        batch_output = self.target_worker.forward_batch_generation(
            None,
            forward_batch=forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
        )
        return self._finish_prefill(batch, batch_output, forward_batch, on_publish)

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (load_batch + mark only on the decode-graph path) in EAGLEWorkerV2.verify
    # expect: clean
    def verify(self, batch: ScheduleBatch, pp_proxy_tensors=None, grammar_barrier=None):
        verify_input = batch.spec_info
        with self.plan_stream_ctx:
            if self.plan_stream is not None:
                self.plan_stream.wait_stream(
                    torch.get_device_module(self.device).current_stream()
                )
            verify_forward_batch, can_run_cuda_graph = eagle_prepare_for_verify(
                verify_input,
                self.req_to_token_pool,
                batch,
                self.target_worker,
            )
        self._join_plan_stream()
        batch_output = self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            pp_proxy_tensors=pp_proxy_tensors,
        )
        return self._finish_verify(batch, verify_input, batch_output)

    # idiom: sglang/srt/speculative/eagle_worker_common.py run_eagle_verify (metadata_ready_pre_pad) for the eager verify; EagerRunner._execute_extend re-plans TARGET_VERIFY after padding regardless of the mark
    # expect: clean
    def verify_overlapped(self, batch: ScheduleBatch, pp_proxy_tensors=None):
        verify_input = batch.spec_info
        model_runner = self.target_worker.model_runner
        with self.plan_stream_ctx:
            verify_forward_batch, can_run_cuda_graph = eagle_prepare_for_verify(
                verify_input,
                self.req_to_token_pool,
                batch,
                self.target_worker,
            )
            if not can_run_cuda_graph and not verify_forward_batch.forward_mode.is_idle():
                # Warm the eager verify plan while the draft tail drains.
                model_runner.attn_backend.init_forward_metadata(verify_forward_batch)
                verify_forward_batch.mark_forward_metadata_ready()
        self._join_plan_stream()
        batch_output = self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            pp_proxy_tensors=pp_proxy_tensors,
        )
        return self._finish_verify(batch, verify_input, batch_output)


class DpSafeEAGLEWorkerV2(ForkEAGLEWorkerV2):
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EAGLEWorkerV2._forward_prefill_batch; pre-plan only where the batch carries no MLP-sync token counts
    # expect: clean
    def _forward_prefill_batch(
        self, batch, on_publish=None, pp_proxy_tensors=None, coordination_plan=None
    ):
        assert coordination_plan is None, "fork prefill path is uncoordinated"
        model_runner = self.target_worker.model_runner
        forward_batch = ForwardBatch.init_new(
            batch,
            model_runner,
            capture_hidden_mode=self._target_capture_mode(),
            return_hidden_states_before_norm=False,
        )
        runner_pads = forward_batch.global_num_tokens_cpu is not None
        if not forward_batch.forward_mode.is_idle() and not runner_pads:
            with self.plan_stream_ctx:
                model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            self._join_plan_stream()
        batch_output = self.target_worker.forward_batch_generation(
            None,
            forward_batch=forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
        )
        return self._finish_prefill(batch, batch_output, forward_batch, on_publish)
