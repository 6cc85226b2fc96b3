"""FlashInfer MLA decode planning under decode context parallelism.

``BatchMLAPagedAttentionWrapper.plan(qo_indptr, kv_indptr, kv_indices,
kv_len_arr, ...)`` takes per-request KV lengths; under DCP the page ids a
rank can read are its own cyclic slice, so indptr / lengths / indices must all
describe that slice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp import (
    filter_dcp_local_kv_indices,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from flashinfer import BatchMLAPagedAttentionWrapper

    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan


class ForkMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    def _pack_stream(
        self,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
    ):
        bs = len(paged_kernel_lens)
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        is_translated = self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indptr, kv_indices, is_translated

    def _plan(self, wrapper, q_indptr, kv_indptr, kv_indices, kv_lens):
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
    def plan_decode_filtered(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
    ) -> None:
        bs = len(paged_kernel_lens)
        q_indptr = self.q_indptr[: bs + 1]
        kv_indptr, kv_indices, _ = self._pack_stream(
            paged_kernel_lens, paged_kernel_lens_sum, plan, req_pool_indices
        )
        kv_lens = paged_kernel_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            translator = self.attn_backend.kv_index_translator
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
            if translator.needs_read_translate:
                kv_indices = translator.translate_dcp_read_ids(kv_indices)
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)

    # expect: clean
    def plan_decode_dcp_sharded(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
    ) -> None:
        bs = len(paged_kernel_lens)
        q_indptr = self.q_indptr[: bs + 1]
        kv_indptr, kv_indices, is_translated = self._pack_stream(
            paged_kernel_lens, paged_kernel_lens_sum, plan, req_pool_indices
        )
        kv_lens = paged_kernel_lens.to(torch.int32)
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
        translator = self.attn_backend.kv_index_translator
        if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)

    # expect: SG203
    def plan_decode_dcp_clamped(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
    ) -> None:
        bs = len(paged_kernel_lens)
        q_indptr = self.q_indptr[: bs + 1]
        kv_indptr, kv_indices, is_translated = self._pack_stream(
            paged_kernel_lens, paged_kernel_lens_sum, plan, req_pool_indices
        )
        kv_lens = paged_kernel_lens.to(torch.int32)
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
            # Rank-local lengths for the kernel; an empty shard stays at 0.
            update_local_kv_lens_for_dcp(kv_lens)
            kv_lens.clamp_(min=0)
        translator = self.attn_backend.kv_index_translator
        if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)

    # expect: clean
    def plan_decode_or_delegate(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
    ) -> None:
        if get_parallel().dcp_enabled:
            self.call_begin_forward(
                wrapper,
                paged_kernel_lens,
                paged_kernel_lens_sum,
                self.q_indptr,
                self.kv_indptr,
                plan=plan,
                req_pool_indices=req_pool_indices,
            )
            return
        bs = len(paged_kernel_lens)
        kv_indptr, kv_indices, _ = self._pack_stream(
            paged_kernel_lens, paged_kernel_lens_sum, plan, req_pool_indices
        )
        self._plan(
            wrapper,
            self.q_indptr[: bs + 1],
            kv_indptr,
            kv_indices,
            paged_kernel_lens.to(torch.int32),
        )


class ForkFlashInferMLABackend(FlashInferMLAAttnBackend):
    """FlashInfer MLA with the decode replay plan split out for reuse."""

    # expect: SG203
    def replay_decode_plan(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        seq_lens_cpu: torch.Tensor,
        plan: "KVLocPlan",
        spec_info=None,
    ) -> None:
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.fast_decode_kwargs.update(
            {
                "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
                "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
                "kv_len_arr_cpu": kv_len_arr_cpu,
            }
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )

    # expect: clean
    def replay_decode_fast_plan(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        seq_lens_cpu: torch.Tensor,
        plan: "KVLocPlan",
        spec_info=None,
    ) -> None:
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
            {
                "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
                "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
                "kv_len_arr_cpu": kv_len_arr_cpu,
            }
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )
