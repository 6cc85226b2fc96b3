"""FlashInfer-MLA decode-updater fork (``BatchMLAPagedAttentionWrapper.plan``).

Under DCP the wrapper must be planned with this rank's view: rank-local
``kv_len_arr``, an indptr built from those lengths and the rank's share of
the KV ids. ``plan_dcp_decode_metadata`` rewrites global lens / indptr /
indices in place into that view.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp.layout import (
    filter_dcp_local_kv_indices,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg41.common.dcp_lens import to_local


def _packed_kv_indices(updater, plan, req_pool_indices, seq_lens, kv_indptr, total):
    """Virtual KV ids of every request's first ``seq_lens`` tokens."""
    kv_indices = torch.empty(total, dtype=torch.int32, device="cuda")
    updater.attn_backend.kv_index_translator.pack_read_stream(
        plan,
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        indptr=kv_indptr,
        out=kv_indices,
    )
    return kv_indices


def _cumsum_indptr(kv_indptr: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    bs = lens.shape[0]
    kv_indptr[1 : bs + 1] = torch.cumsum(lens, dim=0)
    return kv_indptr[: bs + 1]


class ForkMLADecodeUpdater(FlashInferMLAIndicesUpdaterDecode):
    def _plan(self, wrapper, qo_indptr, kv_indptr, kv_indices, kv_lens, causal=False):
        wrapper.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            causal,
            self.scaling,
            self.data_type,
            self.data_type,
        )

    # expect: SG203
    def call_begin_forward_cpu_style(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        *,
        plan,
        req_pool_indices: torch.Tensor,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_indptr = _cumsum_indptr(kv_indptr, paged_kernel_lens)
        kv_indices = _packed_kv_indices(
            self, plan, req_pool_indices, paged_kernel_lens, kv_indptr,
            paged_kernel_lens_sum,
        )
        kv_lens = paged_kernel_lens.to(torch.int32)
        update_local_kv_lens_for_dcp(kv_lens)
        if get_parallel().dcp_enabled:
            plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)

    # expect: clean
    def call_begin_forward_dcp(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        *,
        plan,
        req_pool_indices: torch.Tensor,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_indptr = _cumsum_indptr(kv_indptr, paged_kernel_lens)
        kv_indices = _packed_kv_indices(
            self, plan, req_pool_indices, paged_kernel_lens, kv_indptr,
            paged_kernel_lens_sum,
        )
        kv_lens = paged_kernel_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)

    # expect: SG203
    def plan_decode_filtered_ids(
        self, wrapper, forward_batch: ForwardBatch
    ):
        seq_lens = forward_batch.seq_lens
        req_pool_indices = forward_batch.req_pool_indices
        plan = forward_batch.kv_loc_plan
        bs = seq_lens.shape[0]
        kv_indptr = _cumsum_indptr(self.kv_indptr, seq_lens)
        kv_indices = _packed_kv_indices(
            self, plan, req_pool_indices, seq_lens, kv_indptr, int(seq_lens.sum())
        )
        translator = self.attn_backend.kv_index_translator
        kv_indices = translator.translate_dcp_read_ids(
            filter_dcp_local_kv_indices(kv_indices)
        )
        self._plan(
            wrapper, self.q_indptr[: bs + 1], kv_indptr, kv_indices,
            seq_lens.to(torch.int32),
        )

    # expect: clean
    def plan_decode_rank_view(
        self, wrapper, forward_batch: ForwardBatch
    ):
        seq_lens = forward_batch.seq_lens
        req_pool_indices = forward_batch.req_pool_indices
        plan = forward_batch.kv_loc_plan
        bs = seq_lens.shape[0]
        global_indptr = _cumsum_indptr(self.kv_indptr.clone(), seq_lens)
        kv_indices = _packed_kv_indices(
            self, plan, req_pool_indices, seq_lens, global_indptr, int(seq_lens.sum())
        )
        translator = self.attn_backend.kv_index_translator
        kv_indices = translator.translate_dcp_read_ids(
            filter_dcp_local_kv_indices(kv_indices)
        )
        local_lens = to_local(seq_lens)
        local_indptr = _cumsum_indptr(self.kv_indptr, local_lens)
        self._plan(
            wrapper, self.q_indptr[: bs + 1], local_indptr, kv_indices, local_lens
        )

    # expect: SG203
    def plan_verify_dcp(
        self,
        wrapper,
        forward_batch: ForwardBatch,
    ):
        assert forward_batch.forward_mode.is_target_verify()
        seq_lens = forward_batch.seq_lens
        req_pool_indices = forward_batch.req_pool_indices
        plan = forward_batch.kv_loc_plan
        draft_token_num = forward_batch.spec_info.draft_token_num
        bs = seq_lens.shape[0]
        qo_indptr = torch.arange(
            0, (bs + 1) * draft_token_num, draft_token_num,
            dtype=torch.int32, device=seq_lens.device,
        )
        kv_lens = (seq_lens + draft_token_num).to(torch.int32)
        kv_indptr = _cumsum_indptr(self.kv_indptr, kv_lens)
        kv_indices = _packed_kv_indices(
            self, plan, req_pool_indices, kv_lens, kv_indptr, int(kv_lens.sum())
        )
        if get_parallel().dcp_enabled:
            plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        self._plan(wrapper, qo_indptr, kv_indptr, kv_indices, kv_lens, causal=True)

    # expect: clean
    def plan_verify_single_rank(
        self,
        wrapper,
        forward_batch: ForwardBatch,
    ):
        assert forward_batch.forward_mode.is_target_verify()
        seq_lens = forward_batch.seq_lens
        req_pool_indices = forward_batch.req_pool_indices
        plan = forward_batch.kv_loc_plan
        draft_token_num = forward_batch.spec_info.draft_token_num
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "BatchMLAPagedAttentionWrapper takes no global causal bound; "
                "a DCP verify window needs the cute-dsl decode kernel"
            )
        bs = seq_lens.shape[0]
        qo_indptr = torch.arange(
            0, (bs + 1) * draft_token_num, draft_token_num,
            dtype=torch.int32, device=seq_lens.device,
        )
        kv_lens = (seq_lens + draft_token_num).to(torch.int32)
        kv_indptr = _cumsum_indptr(self.kv_indptr, kv_lens)
        kv_indices = _packed_kv_indices(
            self, plan, req_pool_indices, kv_lens, kv_indptr, int(kv_lens.sum())
        )
        self._plan(wrapper, qo_indptr, kv_indptr, kv_indices, kv_lens, causal=True)

    # expect: SG203
    def update_rank_lens(
        self, wrapper, forward_batch: ForwardBatch
    ):
        seq_lens = forward_batch.seq_lens
        req_pool_indices = forward_batch.req_pool_indices
        plan = forward_batch.kv_loc_plan
        local_lens = to_local(seq_lens)
        self.call_begin_forward(
            wrapper,
            local_lens,
            int(local_lens.sum().item()),
            self.q_indptr,
            self.kv_indptr,
            plan=plan,
            req_pool_indices=req_pool_indices,
        )

    # expect: clean
    def update_batch_lens(
        self, wrapper, forward_batch: ForwardBatch
    ):
        seq_lens = forward_batch.seq_lens
        req_pool_indices = forward_batch.req_pool_indices
        plan = forward_batch.kv_loc_plan
        self.call_begin_forward(
            wrapper,
            seq_lens,
            int(seq_lens.sum().item()),
            self.q_indptr,
            self.kv_indptr,
            plan=plan,
            req_pool_indices=req_pool_indices,
        )

    # expect: SG203
    def plan_decode_compact(
        self, wrapper, forward_batch: ForwardBatch
    ):
        seq_lens = forward_batch.seq_lens
        req_pool_indices = forward_batch.req_pool_indices
        plan = forward_batch.kv_loc_plan
        bs = seq_lens.shape[0]
        kv_indptr = _cumsum_indptr(self.kv_indptr, seq_lens)
        kv_indices = _packed_kv_indices(
            self, plan, req_pool_indices, seq_lens, kv_indptr, int(seq_lens.sum())
        )
        kv_indices = self.attn_backend.kv_index_translator.translate_dcp_read_ids(
            filter_dcp_local_kv_indices(kv_indices)
        )
        local_lens = to_local(seq_lens)
        self._plan(wrapper, self.q_indptr[: bs + 1], kv_indptr, kv_indices, local_lens)
