"""FlashInfer MLA backend forks: DCP-aware wrapper planning.

Covers the decode indices updater, an eager target-verify plan, the
cuda-graph replay plan and the dense page-table plan form.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    PrefillMetadata,
)
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg11.util.dcp_lens import rank_share


# ----------------------------------------------------------------------------
# Decode indices updater (eager plan)
# ----------------------------------------------------------------------------
class DcpDecodeIndicesUpdater(FlashInferMLAIndicesUpdaterDecode):
    """Eager decode plan without the host round trip of plan_dcp_decode_metadata
    (its .item() calls stall the scheduler behind the previous step)."""

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
        if init_metadata_replay or spec_info is not None:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            # Keep only this rank's pages in the stream.
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
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


class LocalizingDecodeIndicesUpdater(FlashInferMLAIndicesUpdaterDecode):
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
        if init_metadata_replay or spec_info is not None:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        self.attn_backend.kv_index_translator.pack_read_stream(
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
            kv_indices = kv_indices[:n_local]
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


# ----------------------------------------------------------------------------
# Backend-level plans
# ----------------------------------------------------------------------------
class DcpFlashInferMLABackend(FlashInferMLAAttnBackend):
    def _verify_plan_inputs(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        kv_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        device = kv_lens.device
        qo_indptr = torch.arange(0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=device)
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=device)
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(int(kv_indptr[-1].item()), dtype=torch.int32, device=device)
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return qo_indptr, kv_indptr, kv_indices, kv_lens

    def _plan_verify(self, qo_indptr, kv_indptr, kv_indices, kv_lens) -> None:
        updater = self.indices_updater_prefill
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            updater.num_local_heads,
            updater.kv_lora_rank,
            updater.qk_rope_head_dim,
            1,
            True,
            updater.scaling,
            updater.q_data_type,
            updater.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)

    # expect: SG203
    def init_verify_metadata_dcp(self, forward_batch: ForwardBatch) -> None:
        """Chain (topk == 1) verify without the custom-mask path."""
        qo_indptr, kv_indptr, kv_indices, kv_lens = self._verify_plan_inputs(
            forward_batch
        )
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        self._plan_verify(qo_indptr, kv_indptr, kv_indices, kv_lens)

    # expect: clean
    def init_verify_metadata_guarded(self, forward_batch: ForwardBatch) -> None:
        if get_parallel().dcp_enabled:
            # The paged MLA wrapper has no per-query global causal bound, so
            # a multi-token verify cannot be placed in this rank's slice.
            raise NotImplementedError(
                "flashinfer_mla target verify is not supported with DCP"
            )
        qo_indptr, kv_indptr, kv_indices, kv_lens = self._verify_plan_inputs(
            forward_batch
        )
        self._plan_verify(qo_indptr, kv_indptr, kv_indices, kv_lens)

    # expect: SG203
    def replay_decode_plan(self, bs: int, seq_lens_cpu: torch.Tensor) -> None:
        """Host-side replan for decode graph replay (indices already filled)."""
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        # Work on a copy: seq_lens_cpu aliases the batch's host lens.
        local_lens = kv_len_arr_cpu.clone()
        update_local_kv_lens_for_dcp(local_lens)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(local_lens, dim=0)
        wrapper = self.decode_cuda_graph_metadata[bs]
        updater = self.indices_updater_decode
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indices,
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

    # expect: clean
    def replay_decode_plan_inplace(self, bs: int, seq_lens_cpu: torch.Tensor) -> None:
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        wrapper = self.decode_cuda_graph_metadata[bs]
        updater = self.indices_updater_decode
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indices,
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


class DenseTableMLABackend(FlashInferMLAAttnBackend):
    """Plans the decode wrapper through the dense page-table form (cutlass /
    cuTile kernels on SM100)."""

    def _plan_dense(self, bs: int, block_tables: torch.Tensor, kv_lens: torch.Tensor):
        updater = self.indices_updater_decode
        self.decode_wrapper.plan(
            cum_seq_lens_q=self.q_indptr_decode[: bs + 1],
            block_tables=block_tables,
            seq_lens=kv_lens,
            num_heads=updater.num_local_heads,
            head_dim_ckv=updater.kv_lora_rank,
            head_dim_kpe=updater.qk_rope_head_dim,
            page_size=self.page_size,
            causal=False,
            sm_scale=updater.scaling,
            q_data_type=updater.data_type,
            kv_data_type=updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: SG203
    def plan_dense_decode(self, forward_batch: ForwardBatch, block_tables: torch.Tensor):
        """``block_tables`` comes from the DCP page-table builder (this rank's
        pages only) when DCP is on."""
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        self._plan_dense(bs, block_tables, kv_lens)

    # expect: clean
    def plan_dense_decode_local(
        self, forward_batch: ForwardBatch, block_tables: torch.Tensor
    ):
        bs = forward_batch.batch_size
        kv_lens = rank_share(forward_batch.seq_lens[:bs].to(torch.int32))
        self._plan_dense(bs, block_tables, kv_lens)


class NonDcpFastPlanMLABackend(FlashInferMLAAttnBackend):
    """Sync-free eager decode plan from the host lens (no kv_len D2H copy)."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if (
            get_parallel().dcp_enabled
            or not forward_batch.forward_mode.is_decode()
            or forward_batch.seq_lens_cpu is None
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_len_cpu = forward_batch.seq_lens_cpu[:bs].to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(forward_batch.seq_lens[:bs], dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=kv_indptr.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            indptr=kv_indptr,
            out=kv_indices,
        )
        updater = self.indices_updater_decode
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_len_cpu.to(kv_indptr.device, non_blocking=True),
            updater.num_local_heads,
            updater.kv_lora_rank,
            updater.qk_rope_head_dim,
            1,
            False,
            updater.scaling,
            updater.data_type,
            updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)
