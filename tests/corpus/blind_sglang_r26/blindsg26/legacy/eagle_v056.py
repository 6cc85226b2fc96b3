"""0.5.6 branch of the fork: EAGLE worker overrides (``skip_attn_backend_init`` API).

Built against SGLang 0.5.6: ``ModelRunner.forward`` returns
``(logits_output, can_run_graph)`` and honours ``skip_attn_backend_init`` in
``forward_decode`` / ``forward_extend`` after ``_forward_raw`` has run
``prepare_mlp_sync_batch``.
"""

from __future__ import annotations

import logging
from typing import List

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput
from sglang.srt.speculative.eagle_utils import (
    build_tree_kernel_efficient,
    organize_draft_results,
)
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.spec_utils import fast_topk, select_top_k_tokens

logger = logging.getLogger(__name__)


class ForkLegacyEAGLEWorker(EAGLEWorker):
    # ---------------------------------------------------------------- helpers
    def _build_draft_extend_after_decode(self, batch: ScheduleBatch):
        backups = (
            batch.seq_lens.clone(),
            batch.seq_lens_cpu.clone(),
            batch.req_pool_indices,
            batch.spec_info.accept_length,
            batch.return_logprob,
            batch.forward_mode.is_idle(),
        )
        batch.spec_info.num_tokens_per_batch = self.speculative_num_steps + 1
        batch.spec_info.num_tokens_for_logprob_per_batch = 1
        batch.spec_info.prepare_extend_after_decode(batch, self.speculative_num_steps)
        batch.forward_mode = (
            ForwardMode.DRAFT_EXTEND
            if not batch.forward_mode.is_idle()
            else ForwardMode.IDLE
        )
        batch.return_hidden_states = False
        model_worker_batch = batch.get_model_worker_batch()
        forward_batch = ForwardBatch.init_new(model_worker_batch, self.draft_model_runner)
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        else:
            forward_batch.seq_lens_sum = batch.seq_lens.sum().item()
        return forward_batch, backups

    def _restore_after_draft_extend(self, batch: ScheduleBatch, backups) -> None:
        (
            seq_lens,
            seq_lens_cpu,
            req_pool_indices,
            accept_length,
            return_logprob,
            input_is_idle,
        ) = backups
        batch.forward_mode = ForwardMode.DECODE if not input_is_idle else ForwardMode.IDLE
        batch.seq_lens = seq_lens
        batch.seq_lens_cpu = seq_lens_cpu
        batch.req_pool_indices = req_pool_indices
        batch.spec_info.accept_length = accept_length
        batch.return_logprob = return_logprob

    def _replay_draft_extend_graph(self, forward_batch: ForwardBatch):
        logits_output = self.cuda_graph_runner_for_draft_extend.replay(forward_batch)
        forward_batch.spec_info.topk_p, forward_batch.spec_info.topk_index = (
            logits_output.topk_p,
            logits_output.topk_index,
        )
        forward_batch.spec_info.hidden_states = logits_output.hidden_states
        return logits_output

    def _draft_extend_graph_ok(self, forward_batch: ForwardBatch) -> bool:
        return bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run(forward_batch)
        )

    def _verify_input_from_tree(
        self, batch, spec_info, parent_list, top_scores_index, draft_tokens
    ) -> EagleVerifyInput:
        (
            tree_mask,
            position,
            retrive_index,
            retrive_next_token,
            retrive_next_sibling,
            draft_tokens,
        ) = build_tree_kernel_efficient(
            spec_info.verified_id,
            parent_list,
            top_scores_index,
            draft_tokens,
            batch.seq_lens,
            batch.seq_lens_sum,
            self.topk,
            self.speculative_num_steps,
            self.speculative_num_draft_tokens,
        )
        return EagleVerifyInput(
            draft_token=draft_tokens,
            custom_mask=tree_mask,
            positions=position,
            retrive_index=retrive_index,
            retrive_next_token=retrive_next_token,
            retrive_next_sibling=retrive_next_sibling,
            retrive_cum_len=None,
            spec_steps=self.speculative_num_steps,
            topk=self.topk,
            draft_token_num=self.speculative_num_draft_tokens,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            seq_lens_sum=batch.seq_lens_sum,
            seq_lens_cpu=batch.seq_lens_cpu,
        )

    # ------------------------------------------------------------------ cases
    # idiom: sglang/srt/speculative/eagle_worker.py (0.5.6) EAGLEWorker.draft + draft_forward: plan, then forward(skip_attn_backend_init=True) per step
    # expect: SG106
    def draft(self, batch: ScheduleBatch):
        if batch.forward_mode.is_idle():
            self._draft_preprocess_idle(batch)
        else:
            self._draft_preprocess_decode(batch)
        spec_info = batch.spec_info
        assert isinstance(spec_info, EagleDraftInput)
        spec_info.capture_hidden_mode = CaptureHiddenMode.LAST
        spec_info.num_tokens_per_batch = self.topk
        spec_info.num_tokens_for_logprob_per_batch = self.topk
        batch.return_hidden_states = False

        model_worker_batch = batch.get_model_worker_batch()
        forward_batch = ForwardBatch.init_new(model_worker_batch, self.draft_model_runner)
        if self.cuda_graph_runner and self.cuda_graph_runner.can_run(forward_batch):
            parent_list, top_scores_index, draft_tokens = self.cuda_graph_runner.replay(
                forward_batch
            )
        else:
            forward_batch.can_run_dp_cuda_graph = False
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
            hidden_states = spec_info.hidden_states
            out_cache_loc = forward_batch.out_cache_loc.reshape(
                forward_batch.batch_size, self.topk, self.speculative_num_steps
            )
            out_cache_loc = out_cache_loc.permute((2, 0, 1)).reshape(
                self.speculative_num_steps, -1
            )
            score_list: List[torch.Tensor] = []
            token_list: List[torch.Tensor] = []
            parents_list: List[torch.Tensor] = []
            scores = None
            for i in range(self.speculative_num_steps):
                input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                    i, topk_p, topk_index, hidden_states, scores, self.topk
                )
                score_list.append(tree_info[0])
                token_list.append(tree_info[1])
                parents_list.append(tree_info[2])
                if i == self.speculative_num_steps - 1:
                    break
                forward_batch.input_ids = input_ids
                forward_batch.out_cache_loc = out_cache_loc[i]
                forward_batch.positions.add_(1)
                forward_batch.attn_backend = self.draft_attn_backend.attn_backends[i]
                spec_info.hidden_states = hidden_states
                logits_output, _ = self.draft_model_runner.forward(
                    forward_batch, skip_attn_backend_init=True
                )
                probs = torch.softmax(logits_output.next_token_logits, dim=-1)
                topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
                hidden_states = logits_output.hidden_states
            parent_list, top_scores_index, draft_tokens = organize_draft_results(
                score_list, token_list, parents_list, self.speculative_num_draft_tokens
            )

        if batch.forward_mode.is_idle():
            return EagleVerifyInput.create_idle_input(
                self.topk, self.speculative_num_steps, self.speculative_num_draft_tokens
            )
        return self._verify_input_from_tree(
            batch, spec_info, parent_list, top_scores_index, draft_tokens
        )

    # idiom: sglang/srt/speculative/eagle_worker.py (0.5.6) EAGLEWorker.forward_draft_extend_after_decode (init_forward_metadata, then forward(skip_attn_backend_init=True))
    # expect: SG106
    def forward_draft_extend_after_decode(self, batch: ScheduleBatch):
        forward_batch, backups = self._build_draft_extend_after_decode(batch)
        if self._draft_extend_graph_ok(forward_batch):
            logits_output = self._replay_draft_extend_graph(forward_batch)
        else:
            forward_batch.can_run_dp_cuda_graph = False
            if not forward_batch.forward_mode.is_idle():
                self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
            logits_output, _ = self.draft_model_runner.forward(
                forward_batch, skip_attn_backend_init=True
            )
            self.capture_for_decode(logits_output, forward_batch.spec_info)
        self._restore_after_draft_extend(batch, backups)
        return logits_output

    # idiom: sglang/srt/speculative/eagle_worker.py (0.5.6) EAGLEWorker.forward_draft_extend_after_decode, skip_attn_backend_init only when no MLP-sync padding runs
    # expect: clean
    def forward_draft_extend_after_decode_dp_safe(self, batch: ScheduleBatch):
        forward_batch, backups = self._build_draft_extend_after_decode(batch)
        if self._draft_extend_graph_ok(forward_batch):
            logits_output = self._replay_draft_extend_graph(forward_batch)
        else:
            forward_batch.can_run_dp_cuda_graph = False
            # With DP attention _forward_raw pads first; forward_extend must
            # then plan the padded batch itself.
            skip_init = forward_batch.global_num_tokens_cpu is None
            if skip_init and not forward_batch.forward_mode.is_idle():
                self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
            logits_output, _ = self.draft_model_runner.forward(
                forward_batch, skip_attn_backend_init=skip_init
            )
            self.capture_for_decode(logits_output, forward_batch.spec_info)
        self._restore_after_draft_extend(batch, backups)
        return logits_output

    # idiom: sglang/srt/model_executor/model_runner.py (0.5.6) ModelRunner._forward_raw steps inlined: prepare_mlp_sync_batch, init_forward_metadata, forward_extend(skip_attn_backend_init=True)
    # expect: clean
    def forward_draft_extend_after_decode_padded(self, batch: ScheduleBatch):
        forward_batch, backups = self._build_draft_extend_after_decode(batch)
        if self._draft_extend_graph_ok(forward_batch):
            logits_output = self._replay_draft_extend_graph(forward_batch)
        else:
            runner = self.draft_model_runner
            forward_batch.can_run_dp_cuda_graph = False
            padded = forward_batch.global_num_tokens_cpu is not None
            if padded:
                forward_batch.prepare_mlp_sync_batch(runner)
            if forward_batch.forward_mode.is_idle():
                logits_output = runner.forward_idle(forward_batch)
            else:
                runner.attn_backend.init_forward_metadata(forward_batch)
                logits_output = runner.forward_extend(
                    forward_batch, skip_attn_backend_init=True
                )
            if padded:
                forward_batch.post_forward_mlp_sync_batch(logits_output)
            self.capture_for_decode(logits_output, forward_batch.spec_info)
        self._restore_after_draft_extend(batch, backups)
        return logits_output

    # idiom: sglang/srt/managers/tp_worker.py (0.5.6) TpModelWorker.forward_batch_generation(None, forward_batch, is_verify=True, skip_attn_backend_init=True) after planning the verify batch
    # expect: SG106
    def verify_preplanned(self, batch: ScheduleBatch, spec_info: EagleVerifyInput):
        spec_info.prepare_for_verify(batch, self.page_size)
        batch.return_hidden_states = False
        batch.forward_mode = (
            ForwardMode.TARGET_VERIFY
            if not batch.forward_mode.is_idle()
            else ForwardMode.IDLE
        )
        batch.spec_info = spec_info
        model_worker_batch = batch.get_model_worker_batch(
            seq_lens_cpu_cache=spec_info.seq_lens_cpu
        )
        target_runner = self.target_worker.model_runner
        forward_batch = ForwardBatch.init_new(model_worker_batch, target_runner)
        can_run_graph = bool(
            target_runner.graph_runner and target_runner.graph_runner.can_run(forward_batch)
        )
        if not can_run_graph and not forward_batch.forward_mode.is_idle():
            target_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.target_worker.forward_batch_generation(
            None,
            forward_batch=forward_batch,
            is_verify=True,
            skip_attn_backend_init=not can_run_graph,
        )
