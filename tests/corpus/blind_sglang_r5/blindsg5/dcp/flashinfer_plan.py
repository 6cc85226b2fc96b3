"""FlashInfer-MLA decode planning under DCP (BatchMLAPagedAttentionWrapper).

Eager decode plans go through ``call_begin_forward`` (spec_info is None for
plain decode); CUDA-graph replay re-plans the captured wrapper on host arrays
through ``replay_plan``.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.runtime_context import get_parallel


class _DecodeUpdaterBase(FlashInferMLAIndicesUpdaterDecode):
    def _pack_virtual_indices(self, plan, req_pool_indices, paged_kernel_lens, kv_indptr, total):
        kv_indices = torch.empty(total, dtype=torch.int32, device="cuda")
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indices


class LocalIndexDecodeUpdater(_DecodeUpdaterBase):
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._pack_virtual_indices(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        translator = self.attn_backend.kv_index_translator
        if get_parallel().dcp_enabled:
            # Keep this rank's slots only, collapsed to physical rows.
            kv_indices = translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )

    # expect: SG203
    def replay_plan(
        self,
        wrapper,
        seq_lens_cpu: torch.Tensor,
        kv_indices: torch.Tensor,
        bs: int,
    ):
        qo_indptr_cpu = torch.arange(0, bs + 1, dtype=torch.int32)
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        kv_indptr_cpu[1:] = torch.cumsum(kv_len_arr_cpu, dim=0)
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        wrapper.plan(
            qo_indptr=qo_indptr_cpu,
            kv_indptr=kv_indptr_cpu,
            kv_indices=kv_indices,
            kv_len_arr=kv_len_arr_cpu,
            num_heads=self.num_local_heads,
            head_dim_ckv=self.kv_lora_rank,
            head_dim_kpe=self.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=self.scaling,
            q_data_type=self.data_type,
            kv_data_type=self.data_type,
        )


class ShardedDecodeUpdater(_DecodeUpdaterBase):
    # expect: clean
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._pack_virtual_indices(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        translator = self.attn_backend.kv_index_translator
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr / kv_indices to this rank's shard.
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        if n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )

    # expect: clean
    def replay_plan(
        self,
        wrapper,
        seq_lens_cpu: torch.Tensor,
        kv_indices: torch.Tensor,
        bs: int,
    ):
        qo_indptr_cpu = torch.arange(0, bs + 1, dtype=torch.int32)
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        # No-op without DCP; otherwise this rank's share, in place.
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        kv_indptr_cpu[1:] = torch.cumsum(kv_len_arr_cpu, dim=0)
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        wrapper.plan(
            qo_indptr=qo_indptr_cpu,
            kv_indptr=kv_indptr_cpu,
            kv_indices=kv_indices,
            kv_len_arr=kv_len_arr_cpu,
            num_heads=self.num_local_heads,
            head_dim_ckv=self.kv_lora_rank,
            head_dim_kpe=self.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=self.scaling,
            q_data_type=self.data_type,
            kv_data_type=self.data_type,
        )


class ClonedLensDecodeUpdater(_DecodeUpdaterBase):
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._pack_virtual_indices(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        translator = self.attn_backend.kv_index_translator
        if get_parallel().dcp_enabled:
            # Local view for the indptr; keep kv_lens intact for the
            # fixup pass that runs after the merge.
            local_lens = kv_lens.clone()
            update_local_kv_lens_for_dcp(local_lens)
            kv_indptr[1:] = torch.cumsum(local_lens, dim=0)
            kv_indices = translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


class InPlaceLensDecodeUpdater(_DecodeUpdaterBase):
    # expect: clean
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._pack_virtual_indices(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        translator = self.attn_backend.kv_index_translator
        if get_parallel().dcp_enabled:
            update_local_kv_lens_for_dcp(kv_lens)
            kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
            kv_indices = translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )
