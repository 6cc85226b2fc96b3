"""Fork of the v2 EAGLE draft worker with an eager DP-attention draft path.

Upstream's ``EagleDraftWorker.draft`` / ``_draft_extend_for_decode`` assume the
cuda-graph runners cover DP attention; our deployments disable the draft
graphs on the DP ranks, so this subclass carries eager variants.
"""

from __future__ import annotations

import functools
import logging
from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import (
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

from blindsg4.dp.sync import (
    attach_dp_token_counts,
    dp_sync_active,
    make_preplanned_forward,
    plan_and_mark,
)

logger = logging.getLogger(__name__)


class DPEagerDraftWorker(EagleDraftWorker):
    """EAGLE draft worker that runs its DP-attention draft steps eagerly."""

    # ------------------------------------------------------------------
    # draft
    # ------------------------------------------------------------------
    def _build_draft_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, _, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            None,  # eager: no draft cuda graph on DP ranks
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )
        return forward_batch

    def _run_draft_steps(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        """Eager multi-step draft; every step goes through the runner."""
        outs = []
        for _ in range(self.speculative_num_steps):
            out = self.draft_runner.forward(forward_batch).logits_output
            outs.append(out.next_token_logits)
            forward_batch.positions.add_(1)
        return outs

    # expect: SG106
    def draft_dp(self, batch: ScheduleBatch):
        forward_batch = self._build_draft_batch(batch)
        attach_dp_token_counts(forward_batch, batch, self.topk)
        if self.speculative_num_steps > 1:
            plan_and_mark(self.draft_attn_backend, forward_batch)
        return self._run_draft_steps(forward_batch)

    # expect: clean
    def draft_dp_replan(self, batch: ScheduleBatch):
        forward_batch = self._build_draft_batch(batch)
        attach_dp_token_counts(forward_batch, batch, self.topk)
        if self.speculative_num_steps > 1:
            # The runner re-plans post-pad when DP padding changed the shape.
            plan_and_mark(self.draft_attn_backend, forward_batch, replan=True)
        return self._run_draft_steps(forward_batch)

    # expect: SG106
    def draft_dp_bound(self, batch: ScheduleBatch):
        forward_batch = self._build_draft_batch(batch)
        attach_dp_token_counts(forward_batch, batch, self.topk)
        step_fn = make_preplanned_forward(self.draft_runner, self.draft_attn_backend)
        logits = []
        for _ in range(self.speculative_num_steps):
            logits.append(step_fn(forward_batch).logits_output.next_token_logits)
            forward_batch.positions.add_(1)
        return logits

    # expect: clean
    def draft_dp_bound_safe(self, batch: ScheduleBatch):
        forward_batch = self._build_draft_batch(batch)
        attach_dp_token_counts(forward_batch, batch, self.topk)
        step_fn = make_preplanned_forward(
            self.draft_runner, self.draft_attn_backend, replan_safe=True
        )
        logits = []
        for _ in range(self.speculative_num_steps):
            logits.append(step_fn(forward_batch).logits_output.next_token_logits)
            forward_batch.positions.add_(1)
        return logits

    # ------------------------------------------------------------------
    # draft extend (decode)
    # ------------------------------------------------------------------
    def _eager_draft_extend_batch(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ) -> ForwardBatch:
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        return prepare_for_draft_extend(
            draft_extend_input,
            batch,
            batch_result.next_token_ids.to(torch.int64),
            self.speculative_num_draft_tokens,
            self.draft_runner,
            None,
            return_hidden_states_before_norm=False,
        )

    # expect: SG106
    def draft_extend_eager(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._eager_draft_extend_batch(batch, batch_result)
        attach_dp_token_counts(
            forward_batch, batch, self.speculative_num_draft_tokens
        )
        out = self.draft_runner.forward(forward_batch)
        return out.logits_output

    # expect: clean
    def draft_extend_eager_remark(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._eager_draft_extend_batch(batch, batch_result)
        attach_dp_token_counts(
            forward_batch, batch, self.speculative_num_draft_tokens
        )
        # Same backend object as the forward path: safe to re-plan post-pad.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        out = self.draft_runner.forward(forward_batch)
        return out.logits_output

    # expect: clean
    def draft_extend_eager_unmarked(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._eager_draft_extend_batch(batch, batch_result)
        attach_dp_token_counts(
            forward_batch, batch, self.speculative_num_draft_tokens
        )
        if dp_sync_active(forward_batch):
            # Drop the pre-pad plan; the runner plans the padded batch itself.
            forward_batch.forward_metadata_ready = False
        out = self.draft_runner.forward(forward_batch)
        return out.logits_output

    # expect: SG106
    def draft_extend_partial(
        self, batch: ScheduleBatch, forward_batch: ForwardBatch
    ):
        forward_batch.init_mlp_sync_metadata(
            batch, self.device, is_draft_worker=True
        )
        run = functools.partial(self.draft_runner.forward, skip_attn_backend_init=True)
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        return run(forward_batch).logits_output

    # expect: clean
    def draft_extend_partial_guarded(
        self, batch: ScheduleBatch, forward_batch: ForwardBatch
    ):
        forward_batch.init_mlp_sync_metadata(
            batch, self.device, is_draft_worker=True
        )
        preplan = not dp_sync_active(forward_batch)
        run = functools.partial(
            self.draft_runner.forward, skip_attn_backend_init=preplan
        )
        if preplan and not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        return run(forward_batch).logits_output

    # expect: SG106
    def draft_extend_kwargs(
        self, forward_batch: ForwardBatch, can_run_graph: bool
    ):
        if can_run_graph:
            return self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, forward_batch.spec_info.select_index
            )
        run_kwargs = {"pp_proxy_tensors": None}
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            run_kwargs["skip_attn_backend_init"] = True
        assert forward_batch.global_num_tokens_cpu is not None, "DP ranks only"
        return self.draft_runner.forward(forward_batch, **run_kwargs).logits_output

    # expect: clean
    def draft_extend_kwargs_dp_aware(
        self, forward_batch: ForwardBatch, can_run_graph: bool
    ):
        if can_run_graph:
            return self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, forward_batch.spec_info.select_index
            )
        run_kwargs = {"pp_proxy_tensors": None}
        if (
            not forward_batch.forward_mode.is_idle()
            and forward_batch.global_num_tokens_cpu is None
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            run_kwargs["skip_attn_backend_init"] = True
        return self.draft_runner.forward(forward_batch, **run_kwargs).logits_output

    # expect: SG106
    def draft_extend_legacy(
        self, batch: ScheduleBatch, forward_batch: ForwardBatch
    ):
        # 0.5.6-style eager draft extend kept for the DP ranks.
        forward_batch.init_mlp_sync_metadata(
            batch, self.device, is_draft_worker=True
        )
        forward_batch.can_run_dp_cuda_graph = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        ret = self.draft_runner.forward(forward_batch, skip_attn_backend_init=True)
        return ret.logits_output

    # expect: clean
    def draft_extend_legacy_fixed(
        self, batch: ScheduleBatch, forward_batch: ForwardBatch
    ):
        forward_batch.init_mlp_sync_metadata(
            batch, self.device, is_draft_worker=True
        )
        forward_batch.can_run_dp_cuda_graph = False
        # Let the runner plan after it pads the batch for DP attention.
        ret = self.draft_runner.forward(forward_batch)
        return ret.logits_output
