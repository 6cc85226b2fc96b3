"""FlashInfer-MLA decode planning overrides (fork: DCP decode on the
BatchMLAPagedAttentionWrapper path)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp.layout import (
    filter_dcp_local_kv_indices,
    get_dcp_lens,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from flashinfer.mla import BatchMLAPagedAttentionWrapper

    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan


class _IndicesMixin:
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


class LocalIndptrUpdaterDecode(_IndicesMixin, FlashInferMLAIndicesUpdaterDecode):
    """Eager-only DCP decode planning (no CUDA-graph replay, no spec)."""

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan: "KVLocPlan",
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
        parallel = get_parallel()
        if parallel.dcp_enabled:
            local_lens = get_dcp_lens(kv_lens, parallel.dcp_size, parallel.dcp_rank)
            kv_indptr = kv_indptr.clone()
            kv_indptr[1:] = torch.cumsum(local_lens, dim=0)
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class LocalLensUpdaterDecode(_IndicesMixin, FlashInferMLAIndicesUpdaterDecode):
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan: "KVLocPlan",
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
        parallel = get_parallel()
        if parallel.dcp_enabled:
            kv_lens = get_dcp_lens(kv_lens, parallel.dcp_size, parallel.dcp_rank)
            kv_indptr = kv_indptr.clone()
            kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class InPlaceLensUpdaterDecode(_IndicesMixin, FlashInferMLAIndicesUpdaterDecode):
    """Mirrors the upstream planner: the lengths are localised in place."""

    # expect: clean
    def call_begin_forward(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan: "KVLocPlan",
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
        if get_parallel().dcp_enabled:
            update_local_kv_lens_for_dcp(kv_lens)
            kv_indptr = kv_indptr.clone()
            kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class ClonedLensUpdaterDecode(_IndicesMixin, FlashInferMLAIndicesUpdaterDecode):
    """Keeps the caller's length tensor intact (it is shared with the
    speculative worker) and localises a private copy."""

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan: "KVLocPlan",
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
        if get_parallel().dcp_enabled:
            local_lens = kv_lens.clone()
            update_local_kv_lens_for_dcp(local_lens)
            kv_indptr = kv_indptr.clone()
            kv_indptr[1:] = torch.cumsum(local_lens, dim=0)
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


# ---------------------------------------------------------------------------
# CUDA-graph replay: host-side fast plan
# ---------------------------------------------------------------------------


class _ReplayPlanMixin:
    def _fast_plan(self, bs, kv_indices, kv_len_arr_cpu):
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        wrapper = self.decode_cuda_graph_metadata[bs]
        updater = self.indices_updater_decode
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
            kv_indices,
            kv_len_arr_cpu,
            updater.num_local_heads,
            updater.kv_lora_rank,
            updater.qk_rope_head_dim,
            1,
            False,
            updater.scaling,
            updater.data_type,
            updater.data_type,
        )


class ReplayPlanFlashInferMLABackend(_ReplayPlanMixin, FlashInferMLAAttnBackend):
    """Skips the indices updater on decode replay: the graph's kv_indices
    buffer was already filled by the capture-time updater."""

    # expect: SG203
    def replay_decode_plan(
        self,
        bs: int,
        seq_lens_cpu: torch.Tensor,
        kv_indices: Optional[torch.Tensor] = None,
    ):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        if kv_indices is None:
            kv_indices = self.cuda_graph_kv_indices
        self._fast_plan(bs, kv_indices, kv_len_arr_cpu)


class ReplayPlanLocalFlashInferMLABackend(_ReplayPlanMixin, FlashInferMLAAttnBackend):
    # expect: clean
    def replay_decode_plan(
        self,
        bs: int,
        seq_lens_cpu: torch.Tensor,
        kv_indices: Optional[torch.Tensor] = None,
    ):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        parallel = get_parallel()
        if parallel.dcp_enabled:
            kv_len_arr_cpu = get_dcp_lens(
                kv_len_arr_cpu, parallel.dcp_size, parallel.dcp_rank
            )
        if kv_indices is None:
            kv_indices = self.cuda_graph_kv_indices
        self._fast_plan(bs, kv_indices, kv_len_arr_cpu)


class ReplayPlanNoDcpFlashInferMLABackend(_ReplayPlanMixin, FlashInferMLAAttnBackend):
    """Fast replay only where every rank holds the whole KV; DCP goes through
    the upstream replay body (which shards the indices as well)."""

    # expect: clean
    def replay_decode_plan(
        self,
        bs: int,
        seq_lens_cpu: torch.Tensor,
        kv_indices: Optional[torch.Tensor] = None,
    ):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "fast decode replay shares one kv_indices buffer across DCP "
                "ranks; use init_forward_metadata_out_graph"
            )
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        if kv_indices is None:
            kv_indices = self.cuda_graph_kv_indices
        self._fast_plan(bs, kv_indices, kv_len_arr_cpu)
