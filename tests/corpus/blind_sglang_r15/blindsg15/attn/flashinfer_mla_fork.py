"""FlashInfer MLA (BatchMLAPagedAttentionWrapper) planning variants for DCP.

The fork plans the MLA wrapper itself for decode in a few deployments (dense
page-table metadata on Blackwell, canonical ``MLAPlanMetadata`` on newer
FlashInfer) instead of going through the upstream indices updaters.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch

from sglang.kernels.ops.attention.dcp_kernels import create_mla_kv_page_table_for_dcp
from sglang.kernels.ops.attention.kv_indices import (
    create_flashmla_kv_indices_triton,
    get_num_kv_index_blocks_flashmla,
    get_num_page_per_block_flashmla,
)
from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    FlashInferMLAIndicesUpdaterPrefill,
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

if is_flashinfer_available():
    from flashinfer.mla import MLAPlanMetadata

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------
# Indices updaters (decode)
# ----------------------------------------------------------------------------


class ForkMLAIndicesUpdaterDecodeFiltered(FlashInferMLAIndicesUpdaterDecode):
    """Keeps only this rank's ids in the read stream (cheaper than the
    upstream compaction kernel)."""

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
        if spec_info is None:
            kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
            kv_indptr = kv_indptr[: bs + 1]
            kv_indices = torch.empty(
                paged_kernel_lens_sum, dtype=torch.int32, device="cuda"
            )
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
            kv_lens = paged_kernel_lens.to(torch.int32)
        else:
            kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
            kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
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


class ForkMLAIndicesUpdaterDecodeCompacted(FlashInferMLAIndicesUpdaterDecode):
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
        if init_metadata_replay:
            return super().call_begin_forward(
                wrapper,
                paged_kernel_lens,
                paged_kernel_lens_sum,
                q_indptr,
                kv_indptr,
                init_metadata_replay,
                spec_info,
                plan=plan,
                req_pool_indices=req_pool_indices,
                **fast_decode_kwargs,
            )
        dcp_enabled = get_parallel().dcp_enabled
        if spec_info is not None and dcp_enabled:
            raise NotImplementedError(
                "draft-decode MLA plans are not sharded for DCP in this fork"
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        if spec_info is None:
            kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
            kv_indptr = kv_indptr[: bs + 1]
            kv_indices = torch.empty(
                paged_kernel_lens_sum, dtype=torch.int32, device="cuda"
            )
            translator = self.attn_backend.kv_index_translator
            translator.pack_read_stream(
                plan,
                req_pool_indices=req_pool_indices,
                seq_lens=paged_kernel_lens,
                indptr=kv_indptr,
                out=kv_indices,
            )
            if dcp_enabled:
                # Rewrites kv_lens / kv_indptr / kv_indices to this rank's
                # share in place.
                n = plan_dcp_decode_metadata(
                    kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
                )
                valid = kv_indices[:n]
                valid.copy_(translator.translate_dcp_read_ids(valid))
        else:
            kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
            kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
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
# Target verify (prefill updater)
# ----------------------------------------------------------------------------


class ForkMLAIndicesUpdaterPrefillVerify(FlashInferMLAIndicesUpdaterPrefill):
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper_ragged,
        wrapper_paged,
        req_pool_indices,
        paged_kernel_lens,
        paged_kernel_lens_sum,
        seq_lens,
        prefix_lens,
        kv_indptr,
        qo_indptr,
        use_ragged,
        spec_info=None,
        attn_dcp_metadata=None,
        fast_verify_plan_kwargs=None,
        *,
        plan,
        qo_indptr_cpu=None,
        kv_indptr_cpu=None,
        kv_len_arr_cpu=None,
    ):
        if spec_info is None or use_ragged or not get_parallel().dcp_enabled:
            return super().call_begin_forward(
                wrapper_ragged,
                wrapper_paged,
                req_pool_indices,
                paged_kernel_lens,
                paged_kernel_lens_sum,
                seq_lens,
                prefix_lens,
                kv_indptr,
                qo_indptr,
                use_ragged,
                spec_info,
                attn_dcp_metadata=attn_dcp_metadata,
                fast_verify_plan_kwargs=fast_verify_plan_kwargs,
                plan=plan,
                qo_indptr_cpu=qo_indptr_cpu,
                kv_indptr_cpu=kv_indptr_cpu,
                kv_len_arr_cpu=kv_len_arr_cpu,
            )
        # DCP target verify: the verify tree's kv ids come from the spec
        # input; only the owned ones are kept.
        kv_indices, kv_indptr, qo_indptr, _ = spec_info.generate_attn_arg_prefill(
            req_pool_indices=req_pool_indices,
            paged_kernel_lens=paged_kernel_lens,
            paged_kernel_lens_sum=paged_kernel_lens_sum,
            translator=self.attn_backend.kv_index_translator,
            plan=plan,
        )
        kv_indices = filter_dcp_local_kv_indices(kv_indices)
        kv_len_arr = (paged_kernel_lens + spec_info.draft_token_num).to(torch.int32)
        wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_len_arr,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            True,
            self.scaling,
            self.q_data_type,
            self.data_type,
        )


# ----------------------------------------------------------------------------
# Backends
# ----------------------------------------------------------------------------


class ForkFlashInferMLAGraphBackend(FlashInferMLAAttnBackend):
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info,
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture,
            )
        # Host mirror only; skip the device round trip of the upstream path.
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


class ForkFlashInferMLAGraphLocalBackend(FlashInferMLAAttnBackend):
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info,
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


class _ForkDenseMixin:
    """Dense (page-table) decode planning for the cutlass / cuTile MLA paths."""

    def _dense_block_table(
        self, forward_batch: ForwardBatch, kv_lens: torch.Tensor, max_blocks: int
    ) -> torch.Tensor:
        bs = forward_batch.batch_size
        block_tables = torch.full(
            (bs, max_blocks), -1, dtype=torch.int32, device=forward_batch.seq_lens.device
        )
        grid = (bs, get_num_kv_index_blocks_flashmla(max_blocks, self.page_size))
        parallel = get_parallel()
        if parallel.dcp_enabled:
            create_mla_kv_page_table_for_dcp[grid](
                self.req_to_token_pool.req_to_token,
                forward_batch.req_pool_indices,
                kv_lens,
                block_tables,
                None,
                self.req_to_token_pool.req_to_token.stride(0),
                block_tables.stride(0),
                PHYSICAL_PAGE_SIZE=self.page_size,
                DCP_SIZE=parallel.dcp_size,
                DCP_RANK=parallel.dcp_rank,
                PAGES_PER_BLOCK=get_num_page_per_block_flashmla(self.page_size),
                HAS_V2P=False,
            )
        else:
            create_flashmla_kv_indices_triton[grid](
                self.req_to_token_pool.req_to_token,
                forward_batch.req_pool_indices,
                kv_lens,
                None,
                block_tables,
                self.req_to_token_pool.req_to_token.stride(0),
                max_blocks,
                PAGED_SIZE=self.page_size,
            )
        return block_tables

    def _max_blocks(self) -> int:
        return (self.max_context_len + self.page_size - 1) // self.page_size


class ForkFlashInferMLADenseBackend(_ForkDenseMixin, FlashInferMLAAttnBackend):
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        parallel = get_parallel()
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens.to(torch.int32)
        table_lens = (
            get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)
            if parallel.dcp_enabled
            else seq_lens
        )
        block_tables = self._dense_block_table(
            forward_batch, table_lens, self._max_blocks()
        )
        self.decode_wrapper.plan(
            cum_seq_lens_q=self.q_indptr_decode[: bs + 1],
            block_tables=block_tables,
            seq_lens=seq_lens,
            num_heads=self.indices_updater_decode.num_local_heads,
            head_dim_ckv=self.indices_updater_decode.kv_lora_rank,
            head_dim_kpe=self.indices_updater_decode.qk_rope_head_dim,
            page_size=self.page_size,
            causal=False,
            sm_scale=self.indices_updater_decode.scaling,
            q_data_type=self.indices_updater_decode.data_type,
            kv_data_type=self.indices_updater_decode.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class ForkFlashInferMLADenseLocalBackend(_ForkDenseMixin, FlashInferMLAAttnBackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        parallel = get_parallel()
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens.to(torch.int32)
        if parallel.dcp_enabled:
            seq_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
                torch.int32
            )
        block_tables = self._dense_block_table(forward_batch, seq_lens, self._max_blocks())
        self.decode_wrapper.plan(
            cum_seq_lens_q=self.q_indptr_decode[: bs + 1],
            block_tables=block_tables,
            seq_lens=seq_lens,
            num_heads=self.indices_updater_decode.num_local_heads,
            head_dim_ckv=self.indices_updater_decode.kv_lora_rank,
            head_dim_kpe=self.indices_updater_decode.qk_rope_head_dim,
            page_size=self.page_size,
            causal=False,
            sm_scale=self.indices_updater_decode.scaling,
            q_data_type=self.indices_updater_decode.data_type,
            kv_data_type=self.indices_updater_decode.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class ForkFlashInferMLACsrBackend(FlashInferMLAAttnBackend):
    def _owned_read_stream(self, forward_batch: ForwardBatch, kv_indptr) -> torch.Tensor:
        kv_indices = torch.empty(
            int(kv_indptr[-1].item()), dtype=torch.int32, device=kv_indptr.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        return kv_indices

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(forward_batch.seq_lens, dim=0)
        kv_indices = self._owned_read_stream(forward_batch, kv_indptr)
        kv_len_arr = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        updater = self.indices_updater_decode
        self.decode_wrapper.plan(
            metadata=MLAPlanMetadata.csr(
                self.q_indptr_decode[: bs + 1], kv_indptr, kv_indices, kv_len_arr
            ),
            num_heads=updater.num_local_heads,
            head_dim_ckv=updater.kv_lora_rank,
            head_dim_kpe=updater.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=updater.scaling,
            q_data_type=updater.data_type,
            kv_data_type=updater.data_type,
            query_layout="split",
            kv_cache_layout="split",
            lse_mode="basee" if get_parallel().dcp_enabled else "none",
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class ForkFlashInferMLACsrLocalBackend(ForkFlashInferMLACsrBackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return FlashInferMLAAttnBackend.init_forward_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        parallel = get_parallel()
        # The read stream is packed over whole sequences, then filtered.
        full_indptr = torch.zeros_like(self.kv_indptr[: bs + 1])
        full_indptr[1:] = torch.cumsum(forward_batch.seq_lens, dim=0)
        kv_indices = self._owned_read_stream(forward_batch, full_indptr)
        kv_len_arr = forward_batch.seq_lens.to(torch.int32)
        if parallel.dcp_enabled:
            kv_len_arr = get_dcp_lens(
                kv_len_arr, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_len_arr, dim=0)
        updater = self.indices_updater_decode
        self.decode_wrapper.plan(
            metadata=MLAPlanMetadata.csr(
                self.q_indptr_decode[: bs + 1], kv_indptr, kv_indices, kv_len_arr
            ),
            num_heads=updater.num_local_heads,
            head_dim_ckv=updater.kv_lora_rank,
            head_dim_kpe=updater.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=updater.scaling,
            q_data_type=updater.data_type,
            kv_data_type=updater.data_type,
            query_layout="split",
            kv_cache_layout="split",
            lse_mode="basee" if parallel.dcp_enabled else "none",
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class ForkFlashInferMLAFastReplanBackend(FlashInferMLAAttnBackend):
    """Re-plans a captured decode wrapper from host lengths (no D2H)."""

    def _fast_wrapper(self, bs: int):
        wrapper = self.decode_cuda_graph_metadata[bs]
        wrapper.plan = functools.partial(fast_mla_decode_plan, wrapper)
        return wrapper

    # expect: SG203
    def fast_replan_decode(self, bs: int, seq_lens_cpu: torch.Tensor):
        wrapper = self._fast_wrapper(bs)
        updater = self.indices_updater_decode
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu,
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
    def fast_replan_decode_local(self, bs: int, seq_lens_cpu: torch.Tensor):
        wrapper = self._fast_wrapper(bs)
        updater = self.indices_updater_decode
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        if get_parallel().dcp_enabled:
            update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu,
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
