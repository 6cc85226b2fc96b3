"""Frozen-KV MTP draft services.

The assistant reads the target KV only, so every planning call runs inside
the target-KV view (``frozen_kv_target_view``). Upstream keeps all of this on
``FrozenKVMTPDraftWorker``; the fork splits the seed / recurrent loop into a
service that owns the runner, the draft backend and the KV context.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPDraftInput
from sglang.srt.speculative.frozen_kv_mtp_utils import (
    frozen_kv_target_view,
    set_frozen_kv_positions,
    target_kv_pool_view,
)
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.async_probe import maybe_detect_nan
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg37.draft._plan_helpers import pad_for_mlp_sync, reject_dp_attention


class FrozenKVDraftService:
    def __init__(self, draft_model_runner, draft_attn_backend, kv_context, topk: int, num_steps: int, num_draft_tokens: int):
        self.draft_model_runner = draft_model_runner
        self.draft_attn_backend = draft_attn_backend
        self.kv_context = kv_context
        self.topk = topk
        self.speculative_num_steps = num_steps
        self.speculative_num_draft_tokens = num_draft_tokens

    def _target_view(self, forward_batch):
        return frozen_kv_target_view(forward_batch, self.kv_context, self.draft_attn_backend)

    def _pool_view(self, forward_batch):
        return target_kv_pool_view(forward_batch, self.kv_context, self.draft_attn_backend)

    def _init_frozen_kv_metadata(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        forward_batch.seq_lens_sum = torch.sum(forward_batch.seq_lens).item()
        with self._target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _assistant_forward(self, forward_batch: ForwardBatch):
        with (
            self._pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info: FrozenKVMTPDraftInput = forward_batch.spec_info
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)

        forward_batch.input_ids = spec_info.bonus_tokens
        set_frozen_kv_positions(forward_batch, self.topk)
        seed = self._assistant_forward(forward_batch)
        topk_p, topk_index = fast_topk(
            torch.softmax(seed.next_token_logits, dim=-1), self.topk, dim=-1
        )
        hidden_states = seed.hidden_states
        score_list, token_list, parents_list = [], [], []
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
            spec_info.hidden_states = hidden_states
            set_frozen_kv_positions(forward_batch, self.topk)
            logits_output = self._assistant_forward(forward_batch)
            topk_p, topk_index = fast_topk(
                torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
            )
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata_capture_cuda_graph
    # expect: SG106
    def seed_forward_eager(self, forward_batch: ForwardBatch):
        with self._target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata_out_graph(
                forward_batch, in_capture=True
            )
        forward_batch.mark_forward_metadata_ready()
        forward_batch.input_ids = forward_batch.spec_info.bonus_tokens
        set_frozen_kv_positions(forward_batch, self.topk)
        return self._assistant_forward(forward_batch)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata_capture_cuda_graph
    # expect: clean
    def seed_forward_capture_style(self, forward_batch: ForwardBatch):
        reject_dp_attention("Frozen-KV MTP eager seed")
        with self._target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata_out_graph(
                forward_batch, in_capture=True
            )
        forward_batch.mark_forward_metadata_ready()
        forward_batch.input_ids = forward_batch.spec_info.bonus_tokens
        set_frozen_kv_positions(forward_batch, self.topk)
        return self._assistant_forward(forward_batch)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: SG106
    def recurrent_steps(self, forward_batch: ForwardBatch, hidden_states, topk_index):
        planned = False

        def _plan_once():
            nonlocal planned
            if planned or forward_batch.forward_mode.is_idle():
                return
            with self._target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            planned = True

        outputs = []
        for _ in range(self.speculative_num_steps - 1):
            _plan_once()
            forward_batch.input_ids = topk_index.flatten()
            forward_batch.spec_info.hidden_states = hidden_states
            logits_output = self._assistant_forward(forward_batch)
            topk_index = torch.argmax(logits_output.next_token_logits, dim=-1)
            hidden_states = logits_output.hidden_states
            outputs.append(topk_index)
        return outputs

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: clean
    def recurrent_steps_lazy_plan(self, forward_batch: ForwardBatch, hidden_states, topk_index):
        planned = False

        def _plan_once():
            nonlocal planned
            if planned or forward_batch.forward_mode.is_idle():
                return
            pad_for_mlp_sync(self.draft_model_runner, forward_batch)
            with self._target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            planned = True

        outputs = []
        for _ in range(self.speculative_num_steps - 1):
            _plan_once()
            forward_batch.input_ids = topk_index.flatten()
            forward_batch.spec_info.hidden_states = hidden_states
            logits_output = self._assistant_forward(forward_batch)
            topk_index = torch.argmax(logits_output.next_token_logits, dim=-1)
            hidden_states = logits_output.hidden_states
            outputs.append(topk_index)
        return outputs

    # idiom: sglang/srt/speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner.capture_one_shape.run_once (backup / restore)
    # expect: SG106
    def draft_with_restore(self, forward_batch: ForwardBatch):
        hidden_backup = forward_batch.spec_info.hidden_states
        out_cache_loc_backup = forward_batch.out_cache_loc
        try:
            with self._target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            forward_batch.out_cache_loc = None
            return self._assistant_forward(forward_batch)
        finally:
            forward_batch.spec_info.hidden_states = hidden_backup
            forward_batch.out_cache_loc = out_cache_loc_backup

    def _forward_unplanned(self, forward_batch: ForwardBatch):
        forward_batch.out_cache_loc = None
        return self._assistant_forward(forward_batch)

    # idiom: sglang/srt/speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner.capture_one_shape.run_once (backup / restore)
    # expect: clean
    def draft_with_restore_v2(self, forward_batch: ForwardBatch):
        hidden_backup = forward_batch.spec_info.hidden_states
        out_cache_loc_backup = forward_batch.out_cache_loc
        try:
            if forward_batch.global_num_tokens_cpu is not None:
                return self._forward_unplanned(forward_batch)
            with self._target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            forward_batch.out_cache_loc = None
            return self._assistant_forward(forward_batch)
        finally:
            forward_batch.spec_info.hidden_states = hidden_backup
            forward_batch.out_cache_loc = out_cache_loc_backup

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.apply_deprecated_skip_attn_backend_init
    # expect: SG106
    def seed_with_legacy_flag(self, forward_batch: ForwardBatch):
        with self._target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.apply_deprecated_skip_attn_backend_init(True)
        return self._assistant_forward(forward_batch)

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.apply_deprecated_skip_attn_backend_init
    # expect: clean
    def seed_forward_legacy(self, forward_batch: ForwardBatch):
        with self._target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.apply_deprecated_skip_attn_backend_init(
            forward_batch.global_num_tokens_cpu is None
        )
        return self._assistant_forward(forward_batch)


class FrozenKVDraftServiceTPOnly(FrozenKVDraftService):
    """Frozen-KV MTP service for the TP-only serving configs."""

    def __init__(self, *args, **kwargs):
        if get_parallel().attn_dp_enabled or require_mlp_sync():
            raise ValueError(
                "Frozen-KV MTP (NoDP build) does not support --enable-dp-attention"
            )
        super().__init__(*args, **kwargs)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info: FrozenKVMTPDraftInput = forward_batch.spec_info
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)

        forward_batch.input_ids = spec_info.bonus_tokens
        set_frozen_kv_positions(forward_batch, self.topk)
        seed = self._assistant_forward(forward_batch)
        topk_p, topk_index = fast_topk(
            torch.softmax(seed.next_token_logits, dim=-1), self.topk, dim=-1
        )
        hidden_states = seed.hidden_states
        score_list, token_list, parents_list = [], [], []
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
            spec_info.hidden_states = hidden_states
            set_frozen_kv_positions(forward_batch, self.topk)
            logits_output = self._assistant_forward(forward_batch)
            topk_p, topk_index = fast_topk(
                torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
            )
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )


class FrozenKVTopkDraft:
    """Topk > 1 frozen draft (triton / trtllm_mha draft backends)."""

    SUPPORTS_DP_ATTENTION = False

    def __init__(self, draft_model_runner, draft_attn_backend, kv_context, topk: int):
        if require_mlp_sync() and not self.SUPPORTS_DP_ATTENTION:
            raise NotImplementedError(
                f"{type(self).__name__} cannot run with DP attention"
            )
        self.draft_model_runner = draft_model_runner
        self.draft_attn_backend = draft_attn_backend
        self.kv_context = kv_context
        self.topk = topk

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata
    # expect: clean
    def recurrent_step(self, forward_batch: ForwardBatch, input_ids, hidden_states):
        if forward_batch.needs_forward_metadata_init():
            with frozen_kv_target_view(forward_batch, self.kv_context, self.draft_attn_backend):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        forward_batch.input_ids = input_ids
        forward_batch.spec_info.hidden_states = hidden_states
        set_frozen_kv_positions(forward_batch, self.topk)
        with target_kv_pool_view(forward_batch, self.kv_context, self.draft_attn_backend):
            return self.draft_model_runner.forward(forward_batch).logits_output


class DPFrozenKVTopkDraft(FrozenKVTopkDraft):
    SUPPORTS_DP_ATTENTION = True

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata
    # expect: SG106
    def recurrent_step(self, forward_batch: ForwardBatch, input_ids, hidden_states):
        if forward_batch.needs_forward_metadata_init():
            with frozen_kv_target_view(forward_batch, self.kv_context, self.draft_attn_backend):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        forward_batch.input_ids = input_ids
        forward_batch.spec_info.hidden_states = hidden_states
        set_frozen_kv_positions(forward_batch, self.topk)
        with target_kv_pool_view(forward_batch, self.kv_context, self.draft_attn_backend):
            out = self.draft_model_runner.forward(forward_batch).logits_output
        maybe_detect_nan(out.next_token_logits, "frozen-kv dp recurrent step")
        return out
