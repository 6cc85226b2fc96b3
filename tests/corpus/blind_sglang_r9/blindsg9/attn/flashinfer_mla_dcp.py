"""flashinfer_mla (BatchMLAPagedAttentionWrapper) planning variants of the
fork, decode context parallel (DCP) aware."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    fast_mla_decode_plan,
)
from sglang.srt.layers.dcp import (
    filter_dcp_local_kv_indices,
    get_dcp_lens,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg9.common.dcp_lens import rank_local_lens

if is_flashinfer_available():
    from flashinfer import BatchMLAPagedAttentionWrapper
    from flashinfer.mla import MLAPlanMetadata

if TYPE_CHECKING:
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
    from sglang.srt.speculative.spec_info import SpecInput

logger = logging.getLogger(__name__)


class GlobalLensIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that shards only the page list under DCP."""

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional["SpecInput"] = None,
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
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        translator = self.attn_backend.kv_index_translator
        translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
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


class LocalLensIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional["SpecInput"] = None,
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
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        translator = self.attn_backend.kv_index_translator
        translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr to this rank's share in place and
            # compacts this rank's ids to the front of kv_indices.
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
            kv_indices = translator.translate_dcp_read_ids(kv_indices[:n_local])
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


class GlobalLensFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional["SpecInput"],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture,
            )
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
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


class LocalLensFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional["SpecInput"],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture,
            )
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


# expect: SG203
def replan_decode_fast(
    wrapper: BatchMLAPagedAttentionWrapper,
    forward_batch: ForwardBatch,
    kv_indices: torch.Tensor,
    qo_indptr_cpu: torch.Tensor,
    kv_indptr_cpu: torch.Tensor,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    sm_scale: float,
    dtype: torch.dtype,
):
    """Sync-free re-plan of an already-captured decode wrapper."""
    bs = forward_batch.batch_size
    kv_len_arr_cpu = forward_batch.seq_lens_cpu[:bs].to(torch.int32)
    if get_parallel().dcp_enabled:
        kv_indices = filter_dcp_local_kv_indices(kv_indices)
    kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
    fast_mla_decode_plan(
        wrapper,
        qo_indptr_cpu[: bs + 1],
        kv_indptr_cpu[: bs + 1],
        kv_indices,
        kv_len_arr_cpu,
        num_heads,
        kv_lora_rank,
        qk_rope_head_dim,
        1,
        False,
        sm_scale,
        dtype,
        dtype,
    )


# expect: clean
def replan_decode_fast_local(
    wrapper: BatchMLAPagedAttentionWrapper,
    forward_batch: ForwardBatch,
    kv_indices: torch.Tensor,
    qo_indptr_cpu: torch.Tensor,
    kv_indptr_cpu: torch.Tensor,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    sm_scale: float,
    dtype: torch.dtype,
):
    bs = forward_batch.batch_size
    kv_len_arr_cpu = forward_batch.seq_lens_cpu[:bs].to(torch.int32)
    if get_parallel().dcp_enabled:
        kv_indices = filter_dcp_local_kv_indices(kv_indices)
    # In place; a no-op without DCP.
    update_local_kv_lens_for_dcp(kv_len_arr_cpu)
    kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
    fast_mla_decode_plan(
        wrapper,
        qo_indptr_cpu[: bs + 1],
        kv_indptr_cpu[: bs + 1],
        kv_indices,
        kv_len_arr_cpu,
        num_heads,
        kv_lora_rank,
        qk_rope_head_dim,
        1,
        False,
        sm_scale,
        dtype,
        dtype,
    )


class DenseFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    """Plans the decode wrapper with the dense page-table form (cuTile /
    CUTLASS MLA backends of FlashInfer)."""

    def _num_decode_heads(self) -> int:
        return self.indices_updater_decode.num_local_heads

    # expect: SG203
    def _plan_dense_decode(self, forward_batch: ForwardBatch, block_tables: torch.Tensor):
        bs = forward_batch.batch_size
        cum_seq_lens_q = torch.arange(0, bs + 1, dtype=torch.int32, device=self.device)
        self.decode_wrapper.plan(
            cum_seq_lens_q=cum_seq_lens_q,
            block_tables=block_tables,
            seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
            num_heads=self._num_decode_heads(),
            head_dim_ckv=self.indices_updater_decode.kv_lora_rank,
            head_dim_kpe=self.indices_updater_decode.qk_rope_head_dim,
            page_size=self.page_size,
            causal=False,
            sm_scale=self.indices_updater_decode.scaling,
            q_data_type=self.indices_updater_decode.data_type,
            kv_data_type=self.indices_updater_decode.data_type,
            lse_mode="basee" if get_parallel().dcp_enabled else "none",
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: clean
    def _plan_dense_decode_local(
        self, forward_batch: ForwardBatch, block_tables: torch.Tensor
    ):
        bs = forward_batch.batch_size
        cum_seq_lens_q = torch.arange(0, bs + 1, dtype=torch.int32, device=self.device)
        self.decode_wrapper.plan(
            cum_seq_lens_q=cum_seq_lens_q,
            block_tables=block_tables,
            seq_lens=rank_local_lens(forward_batch.seq_lens[:bs].to(torch.int32)),
            num_heads=self._num_decode_heads(),
            head_dim_ckv=self.indices_updater_decode.kv_lora_rank,
            head_dim_kpe=self.indices_updater_decode.qk_rope_head_dim,
            page_size=self.page_size,
            causal=False,
            sm_scale=self.indices_updater_decode.scaling,
            q_data_type=self.indices_updater_decode.data_type,
            kv_data_type=self.indices_updater_decode.data_type,
            lse_mode="basee" if get_parallel().dcp_enabled else "none",
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: SG203
    def _plan_csr_metadata(
        self,
        forward_batch: ForwardBatch,
        kv_indptr: torch.Tensor,
        kv_indices: torch.Tensor,
    ):
        bs = forward_batch.batch_size
        parallel = get_parallel()
        kv_len_arr = forward_batch.seq_lens[:bs].to(torch.int32)
        if parallel.dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
            local = get_dcp_lens(kv_len_arr, parallel.dcp_size, parallel.dcp_rank)
            kv_indptr = torch.nn.functional.pad(torch.cumsum(local, dim=0), (1, 0)).int()
        metadata = MLAPlanMetadata.csr(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_len_arr,
        )
        self.decode_wrapper.plan(
            metadata=metadata,
            num_heads=self._num_decode_heads(),
            head_dim_ckv=self.indices_updater_decode.kv_lora_rank,
            head_dim_kpe=self.indices_updater_decode.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=self.indices_updater_decode.scaling,
            q_data_type=self.indices_updater_decode.data_type,
            kv_data_type=self.indices_updater_decode.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: clean
    def _plan_csr_metadata_local(
        self,
        forward_batch: ForwardBatch,
        kv_indptr: torch.Tensor,
        kv_indices: torch.Tensor,
    ):
        bs = forward_batch.batch_size
        parallel = get_parallel()
        kv_len_arr = forward_batch.seq_lens[:bs].to(torch.int32)
        if parallel.dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
            kv_len_arr = get_dcp_lens(
                kv_len_arr, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
            kv_indptr = torch.nn.functional.pad(
                torch.cumsum(kv_len_arr, dim=0), (1, 0)
            ).int()
        metadata = MLAPlanMetadata.csr(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_len_arr,
        )
        self.decode_wrapper.plan(
            metadata=metadata,
            num_heads=self._num_decode_heads(),
            head_dim_ckv=self.indices_updater_decode.kv_lora_rank,
            head_dim_kpe=self.indices_updater_decode.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=self.indices_updater_decode.scaling,
            q_data_type=self.indices_updater_decode.data_type,
            kv_data_type=self.indices_updater_decode.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class NoDcpFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    """Fork backend for single-rank decode (plans straight from seq_lens)."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "NoDcpFlashInferMLAAttnBackend cannot plan a DCP decode; "
                "use flashinfer_mla with its DCP planner"
            )
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        self.kv_indptr[1 : bs + 1] = torch.cumsum(kv_lens, dim=0)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=self.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
            self.indices_updater_decode.num_local_heads,
            self.indices_updater_decode.kv_lora_rank,
            self.indices_updater_decode.qk_rope_head_dim,
            1,
            False,
            self.indices_updater_decode.scaling,
            self.indices_updater_decode.data_type,
            self.indices_updater_decode.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)
