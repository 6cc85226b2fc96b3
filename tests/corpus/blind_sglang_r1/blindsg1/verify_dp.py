"""Target-verify overrides: plan-stream overlap experiments on EAGLEWorkerV2.

Upstream (0.5.23) defers the non-graph verify plan to the runner's
forward_extend; these variants move it onto the plan stream so it overlaps the
draft tail.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.speculative.eagle_utils import eagle_prepare_for_verify
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

from blindsg1._dp_utils import pad_rows


class PrePlannedVerifyWorker(EAGLEWorkerV2):
    # expect: clean
    def verify(self, batch: ScheduleBatch, pp_proxy_tensors=None, grammar_barrier=None):
        verify_input: EagleVerifyInput = batch.spec_info
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
            if not can_run_cuda_graph and not batch.forward_mode.is_idle():
                self.target_worker.model_runner.attn_backend.init_forward_metadata(
                    verify_forward_batch
                )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            pp_proxy_tensors=pp_proxy_tensors,
            skip_attn_backend_init=True,
        )


class PlanStreamVerifyWorker(EAGLEWorkerV2):
    # expect: clean
    def verify(self, batch: ScheduleBatch, pp_proxy_tensors=None, grammar_barrier=None):
        verify_input: EagleVerifyInput = batch.spec_info
        with self.plan_stream_ctx:
            if self.plan_stream is not None:
                self.plan_stream.wait_stream(
                    torch.get_device_module(self.device).current_stream()
                )
            # Graph path: load_batch planned + marked inside. Eager path stays
            # unmarked so forward_extend plans after the MLP-sync pad.
            verify_forward_batch, can_run_cuda_graph = eagle_prepare_for_verify(
                verify_input,
                self.req_to_token_pool,
                batch,
                self.target_worker,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            pp_proxy_tensors=pp_proxy_tensors,
        )


class PlanStreamTpWorker(TpModelWorker):
    """Target worker that plans decode batches on a side stream while the
    scheduler is still building the next batch."""

    def _forward_kwargs(self, pp_proxy_tensors) -> dict:
        return {"pp_proxy_tensors": pp_proxy_tensors}

    def _plan_on_side_stream(self, forward_batch: ForwardBatch) -> None:
        stream = torch.get_device_module(self.device).Stream()
        with torch.get_device_module(self.device).stream(stream):
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        torch.get_device_module(self.device).current_stream().wait_stream(stream)

    # expect: SG106
    def forward_batch_generation(
        self,
        batch: Optional[ScheduleBatch],
        forward_batch: Optional[ForwardBatch] = None,
        pp_proxy_tensors=None,
        is_verify: bool = False,
        skip_attn_backend_init: Optional[bool] = None,
        **kwargs,
    ):
        if forward_batch is None:
            forward_batch = ForwardBatch.init_new(batch, self.model_runner)
        fwd_kwargs = self._forward_kwargs(pp_proxy_tensors)
        if forward_batch.forward_mode.is_decode():
            self._plan_on_side_stream(forward_batch)
            fwd_kwargs["skip_attn_backend_init"] = True
        if forward_batch.global_num_tokens_cpu is not None:
            # Sync early so the grammar mask build sees the final rows.
            forward_batch.prepare_mlp_sync_batch(self.model_runner)
        return self.model_runner.forward(forward_batch, **fwd_kwargs)


class SideStreamTpWorker(PlanStreamTpWorker):
    # expect: clean
    def forward_batch_generation(
        self,
        batch: Optional[ScheduleBatch],
        forward_batch: Optional[ForwardBatch] = None,
        pp_proxy_tensors=None,
        is_verify: bool = False,
        skip_attn_backend_init: Optional[bool] = None,
        **kwargs,
    ):
        if forward_batch is None:
            forward_batch = ForwardBatch.init_new(batch, self.model_runner)
        fwd_kwargs = self._forward_kwargs(pp_proxy_tensors)
        dp_synced = forward_batch.global_num_tokens_cpu is not None
        if forward_batch.forward_mode.is_decode() and not dp_synced:
            self._plan_on_side_stream(forward_batch)
            fwd_kwargs["skip_attn_backend_init"] = True
        if dp_synced:
            forward_batch.prepare_mlp_sync_batch(self.model_runner)
        return self.model_runner.forward(forward_batch, **fwd_kwargs)


# expect: SG106
def run_spec_target_forward(model_runner: ModelRunner, forward_batch: ForwardBatch):
    """Single entry for target-side spec forwards (verify / v2 draft extend)
    used by our disaggregated decode worker."""
    planned = False
    if (
        forward_batch.forward_mode.is_target_verify()
        or forward_batch.forward_mode.is_draft_extend_v2()
    ):
        model_runner.attn_backend.init_forward_metadata(forward_batch)
        planned = True
    if (
        forward_batch.global_num_tokens_cpu is not None
        and not forward_batch.forward_mode.is_idle()
    ):
        forward_batch.prepare_mlp_sync_batch(model_runner)
    if planned:
        forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch)


# expect: clean
def run_spec_target_forward_pd(
    model_runner: ModelRunner, forward_batch: ForwardBatch
):
    if forward_batch.forward_mode.is_target_verify():
        if forward_batch.global_num_tokens_cpu is None:
            model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        # DP ranks: forward_extend plans after the runner's MLP sync.
    elif forward_batch.forward_mode.is_draft_extend_v2():
        if forward_batch.global_num_tokens_cpu is None:
            model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch)


class PaddedLogitsTpWorker(TpModelWorker):
    """Single-rank worker that hands fixed-width logits to our sampler."""

    # expect: clean
    def forward_batch_generation(
        self,
        batch: Optional[ScheduleBatch],
        forward_batch: Optional[ForwardBatch] = None,
        pp_proxy_tensors=None,
        is_verify: bool = False,
        skip_attn_backend_init: Optional[bool] = None,
        **kwargs,
    ):
        if forward_batch is None:
            forward_batch = ForwardBatch.init_new(batch, self.model_runner)
        if (
            forward_batch.global_num_tokens_cpu is None
            and forward_batch.forward_mode.is_decode()
        ):
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = self.model_runner.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        logits = out.logits_output.next_token_logits
        # Sampler kernel wants a fixed row count; pad after the forward.
        width = self.model_runner.max_decode_logits_rows()
        out.logits_output.next_token_logits = pad_rows(logits, width)
        return out
