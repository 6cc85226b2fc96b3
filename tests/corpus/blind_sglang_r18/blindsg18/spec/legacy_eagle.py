"""Port of our pre-v2 EAGLE worker paths onto the v2 draft worker.

These kept the original ``skip_attn_backend_init`` call style; the runner
maps the deprecated kwarg onto ``ForwardBatch.mark_forward_metadata_ready``.
"""

from __future__ import annotations

from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_server_args
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk, require_mlp_sync


class LegacyDraftRunnerMixin:
    """Accessors the ported v1 code was written against."""

    @property
    def draft_model_runner(self):
        return self.draft_runner

    @property
    def extend_backend(self):
        # The v2 factory installs the draft-extend backend as the runner's
        # attn_backend.
        return self.draft_runner.attn_backend

    def capture_for_decode(self, logits_output, draft_input: EagleDraftInput):
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        draft_input.topk_p, draft_input.topk_index = fast_topk(probs, self.topk, dim=-1)
        draft_input.hidden_states = logits_output.hidden_states


class LegacyEagleDraftWorker(LegacyDraftRunnerMixin, EagleDraftWorker):
    # expect: SG106
    def forward_draft_extend_after_decode(self, batch: ScheduleBatch):
        assert isinstance(batch.spec_info, EagleDraftExtendInput)
        seq_lens_backup = batch.seq_lens.clone()
        req_pool_indices_backup = batch.req_pool_indices
        input_is_idle = batch.forward_mode.is_idle()

        batch.forward_mode = (
            ForwardMode.DRAFT_EXTEND_V2 if not input_is_idle else ForwardMode.IDLE
        )
        batch.return_hidden_states = False
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_model_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        else:
            forward_batch.seq_lens_sum = batch.seq_lens.sum().item()

        can_cuda_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, forward_batch.spec_info.select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
            logits_output = self.draft_model_runner.forward(
                forward_batch, skip_attn_backend_init=True
            ).logits_output
        self.capture_for_decode(logits_output, batch.spec_info)

        batch.forward_mode = ForwardMode.DECODE if not input_is_idle else ForwardMode.IDLE
        batch.seq_lens = seq_lens_backup
        batch.req_pool_indices = req_pool_indices_backup

    # expect: SG106
    def draft_legacy(self, forward_batch: ForwardBatch):
        """v1 ``draft`` + ``draft_forward``: one plan for all steps, then
        each step skips the runner's attention init."""
        spec_info = forward_batch.spec_info
        assert isinstance(spec_info, EagleDraftInput)
        if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)

        out_cache_loc = forward_batch.out_cache_loc.reshape(
            forward_batch.batch_size, self.topk, self.speculative_num_steps
        )
        out_cache_loc = out_cache_loc.permute((2, 0, 1)).reshape(
            self.speculative_num_steps, -1
        )
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        score_list: List[torch.Tensor] = []
        token_list: List[torch.Tensor] = []
        parents_list: List[torch.Tensor] = []
        scores = None
        step = 0
        while True:
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                step, topk_p, topk_index, hidden_states, scores, self.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if step == self.speculative_num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc[step]
            forward_batch.positions.add_(1)
            spec_info.hidden_states = hidden_states
            logits_output = self.draft_model_runner.forward(
                forward_batch, skip_attn_backend_init=True
            ).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
            step += 1

        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    # expect: clean
    def forward_draft_extend_gated(self, batch: ScheduleBatch):
        """Legacy draft extend, keeping the pre-plan only where no MLP-sync
        padding can follow it."""
        input_is_idle = batch.forward_mode.is_idle()
        batch.forward_mode = (
            ForwardMode.DRAFT_EXTEND_V2 if not input_is_idle else ForwardMode.IDLE
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_model_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        skip_init = not require_mlp_sync() and not input_is_idle
        if skip_init:
            self.extend_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_model_runner.forward(
            forward_batch, skip_attn_backend_init=skip_init
        ).logits_output
        self.capture_for_decode(logits_output, batch.spec_info)
        batch.forward_mode = ForwardMode.DECODE if not input_is_idle else ForwardMode.IDLE

    # expect: SG106
    def forward_draft_extend_marked(self, batch: ScheduleBatch, select_index: torch.Tensor):
        """Port of the legacy path where the skip flag was applied on the
        batch itself (the runner no longer takes it)."""
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        if not forward_batch.forward_mode.is_idle():
            self.extend_backend.init_forward_metadata(forward_batch)
            forward_batch.apply_deprecated_skip_attn_backend_init(True)
        out = self.draft_runner.forward(forward_batch)
        logits_output = out.logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        self.capture_for_decode(logits_output, batch.spec_info)
        return out.can_run_graph

    # expect: SG106
    def forward_draft_extend_flagged(self, batch: ScheduleBatch):
        """Sets the readiness flag directly (pre-dates mark_forward_metadata_ready)."""
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        if get_server_args().enable_dp_attention:
            # Under DP attention, plan before the all-gather so the plan
            # overlaps the gather of the other ranks' token counts.
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.forward_metadata_ready = True
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self.capture_for_decode(logits_output, batch.spec_info)

    # expect: clean
    def forward_draft_extend_cleared(self, batch: ScheduleBatch):
        """Pre-plans so the non-DP path overlaps planning with the previous
        step, but clears the mark once the batch has been padded so the
        runner re-plans on the final shapes."""
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        planned = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            planned = True
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)
            if planned:
                # The plan above describes the unpadded rows (and the token
                # count may have moved for attn-tp alignment): drop the mark.
                forward_batch.forward_metadata_ready = False
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self.capture_for_decode(logits_output, batch.spec_info)
