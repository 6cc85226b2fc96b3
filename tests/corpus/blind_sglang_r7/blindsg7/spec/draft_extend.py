"""Draft-extend paths (after target verify / prefill) for the EAGLE v2 worker."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk

from blindsg7.spec.planning import maybe_pad_for_dp

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
        EAGLEDraftExtendCudaGraphRunner,
    )

logger = logging.getLogger(__name__)


def _draft_extend_input(worker, batch_result: GenerationBatchResult):
    return EagleDraftExtendInput(
        hidden_states=batch_result.logits_output.hidden_states,
        num_correct_drafts=batch_result.accept_lens - 1,
        num_accept_tokens=batch_result.accept_lens,
        num_tokens_per_req=worker.speculative_num_draft_tokens,
        num_tokens_for_logprob_per_req=worker.speculative_num_draft_tokens,
    )


def _select_index(worker, batch: ScheduleBatch, batch_result: GenerationBatchResult):
    return (
        torch.arange(
            0,
            len(batch.seq_lens) * worker.speculative_num_draft_tokens,
            worker.speculative_num_draft_tokens,
            device=worker.device,
        )
        + batch_result.accept_lens
        - 1
    )


def _update_next_draft_input(worker, batch_result, logits_output, select_index):
    logits_output.next_token_logits = logits_output.next_token_logits[select_index]
    if logits_output.hidden_states is not None:
        logits_output.hidden_states = logits_output.hidden_states[select_index]
    probs = torch.softmax(logits_output.next_token_logits, dim=-1)
    topk_p, topk_index = fast_topk(probs, worker.topk, dim=-1)
    nxt = batch_result.next_draft_input
    nxt.topk_p, nxt.topk_index, nxt.hidden_states = (
        topk_p,
        topk_index,
        logits_output.hidden_states,
    )


class EagerDraftExtendWorker(EagleDraftWorker):
    """Draft worker with draft-extend CUDA graph disabled (DSA indexer runs)."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = _select_index(self, batch, batch_result)
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                _draft_extend_input(self, batch_result),
                batch,
                batch_result.next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                None,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        _update_next_draft_input(self, batch_result, logits_output, select_index)


def _build_draft_extend_batch(
    worker, batch: ScheduleBatch, batch_result: GenerationBatchResult
) -> ForwardBatch:
    bs = len(batch.seq_lens)
    num_draft_tokens = worker.speculative_num_draft_tokens
    batch.spec_info = _draft_extend_input(worker, batch_result)
    batch.input_ids = batch_result.next_token_ids
    batch.extend_lens = [num_draft_tokens] * bs
    batch.extend_num_tokens = bs * num_draft_tokens
    batch.prefix_lens = batch.seq_lens
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        worker.draft_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    return forward_batch


class ReplanningDraftExtendWorker(EagleDraftWorker):
    """Draft extend through the runner's own backend; the plan is declared
    re-plannable so a DP-padded batch is planned again by the forward."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = _select_index(self, batch, batch_result)
        with self.plan_stream_ctx:
            forward_batch = _build_draft_extend_batch(self, batch, batch_result)
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        _update_next_draft_input(self, batch_result, logits_output, select_index)


class LegacyDraftExtendMixin:
    """Pre-marker style draft extend kept for our 0.5.x fork branch."""

    draft_model_runner: ModelRunner
    cuda_graph_runner_for_draft_extend: Optional[EAGLEDraftExtendCudaGraphRunner] = None

    # expect: SG106
    def forward_draft_extend_after_decode(self, forward_batch: ForwardBatch):
        can_cuda_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_cuda_graph:
            return self.cuda_graph_runner_for_draft_extend.execute(forward_batch)
        forward_batch.can_run_dp_cuda_graph = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_model_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output

    # expect: clean
    def forward_draft_extend_after_prefill(self, forward_batch: ForwardBatch):
        can_cuda_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_cuda_graph:
            return self.cuda_graph_runner_for_draft_extend.execute(forward_batch)
        forward_batch.can_run_dp_cuda_graph = False
        return self.draft_model_runner.forward(forward_batch).logits_output


class KwargsDraftExtendWorker(LegacyDraftExtendMixin):
    def __init__(
        self,
        draft_model_runner: ModelRunner,
        cuda_graph_runner_for_draft_extend: Optional[
            EAGLEDraftExtendCudaGraphRunner
        ] = None,
    ):
        self.draft_model_runner = draft_model_runner
        self.cuda_graph_runner_for_draft_extend = cuda_graph_runner_for_draft_extend
        self._eager_forward_kwargs = {"skip_attn_backend_init": True}

    # expect: SG106
    def run_draft_extend(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_model_runner.forward(forward_batch).logits_output
        self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        out = self.draft_model_runner.forward(
            forward_batch, **self._eager_forward_kwargs
        )
        return out.logits_output

    # expect: clean
    def run_draft_extend_padded(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_model_runner.forward(forward_batch).logits_output
        maybe_pad_for_dp(forward_batch, self.draft_model_runner)
        self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        out = self.draft_model_runner.forward(
            forward_batch, **self._eager_forward_kwargs
        )
        return out.logits_output


class PrefillDraftExtendWorker(EagleDraftWorker):
    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
    ):
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        if batch.input_ids is not None:
            batch.input_ids = torch.cat((batch.input_ids[1:], next_token_ids[-1:]))
        else:
            batch.input_ids = next_token_ids
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
        result = self.draft_worker.forward_batch_generation(
            None, forward_batch=forward_batch, skip_attn_backend_init=True
        )
        return result.logits_output

    # expect: clean
    def _draft_extend_for_prefill_eager(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
    ):
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
        result = self.draft_worker.forward_batch_generation(
            None, forward_batch=forward_batch, skip_attn_backend_init=False
        )
        return result.logits_output


class ManualSyncDraftExtendWorker(EagleDraftWorker):
    """Runs the draft extend through the eager runner directly so the
    gathered buffer length is known before the forward."""

    # expect: SG106
    def run_eager_draft_extend(self, forward_batch: ForwardBatch):
        runner = self.draft_runner
        if forward_batch.forward_mode.is_idle():
            return runner.forward(forward_batch).logits_output
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(runner)
        ret = runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: clean
    def run_eager_draft_extend_synced(self, forward_batch: ForwardBatch):
        runner = self.draft_runner
        if forward_batch.forward_mode.is_idle():
            return runner.forward(forward_batch).logits_output
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(runner)
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        ret = runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret


class PreplannedVerifyWorker(EagleDraftWorker):
    """Plans the target verify on the plan stream while the draft finishes."""

    # expect: clean
    def run_target_verify(self, verify_forward_batch: ForwardBatch):
        target_runner = self.target_worker.model_runner
        with self.plan_stream_ctx:
            if not verify_forward_batch.forward_mode.is_idle():
                target_runner.attn_backend.init_forward_metadata(verify_forward_batch)
                verify_forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return self.target_worker.forward_batch_generation(
            None, forward_batch=verify_forward_batch, is_verify=True
        )
