"""Vendor DCP port of SGLang's FlashInfer MLA backend
(``BatchMLAPagedAttentionWrapper.plan``)."""

from __future__ import annotations

from typing import Optional

import torch
import triton

from sglang.kernels.ops.attention.dcp_kernels import create_mla_kv_page_table_for_dcp
from sglang.kernels.ops.attention.kv_indices import (
    get_num_kv_index_blocks_flashmla,
    get_num_page_per_block_flashmla,
)
from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    PrefillMetadata,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.spec_info import SpecInput
from sglang.srt.utils import is_flashinfer_available

from blindsg34.dcp.lens import to_local
from blindsg34.dcp.world import dcp_from_parallel

if is_flashinfer_available():
    from flashinfer import BatchMLAPagedAttentionWrapper
    from flashinfer.mla import MLAPlanMetadata


def _plan_decode(updater, wrapper, q_indptr, kv_indptr, kv_indices, kv_lens):
    wrapper.plan(
        q_indptr,
        kv_indptr,
        kv_indices,
        kv_lens,
        updater.num_local_heads,
        updater.kv_lora_rank,
        updater.qk_rope_head_dim,
        1,
        False,
        updater.scaling,
        updater.data_type,
        updater.data_type,
    )


class VendorFlashInferMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Eager-only decode updater with a leaner index build."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[SpecInput] = None,
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
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        translator = self.attn_backend.kv_index_translator
        translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if translator.needs_read_translate:
            kv_indices.copy_(translator.translate_dcp_read_ids(kv_indices))
        # num_local_heads already counts the DCP-gathered query heads.
        _plan_decode(self, wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class DcpFlashInferMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[SpecInput] = None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        assert spec_info is None and not init_metadata_replay
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
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr / kv_indices to this rank's shard.
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        if n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        _plan_decode(self, wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class DraftDecodeDcpUpdater(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that also serves the multi-step draft (spec_info rows)."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (spec_info branch)
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[SpecInput] = None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is None:
            bs = len(paged_kernel_lens)
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
                plan_dcp_decode_metadata(
                    kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
                )
        else:
            # Draft step: the per-branch indices were built by
            # generate_draft_decode_kv_indices; reuse them as-is.
            kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
            bs = kv_indptr.numel() - 1
            kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        _plan_decode(self, wrapper, q_indptr[: bs + 1], kv_indptr, kv_indices, kv_lens)


class DraftDecodeDcpUpdaterLocalized(FlashInferMLAIndicesUpdaterDecode):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (spec_info branch)
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[SpecInput] = None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is None:
            bs = len(paged_kernel_lens)
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
        else:
            # Private copies: the shard rewrite below is in place.
            kv_indptr = spec_info.kv_indptr.clone()
            kv_indices = spec_info.kv_indices.clone()
            bs = kv_indptr.numel() - 1
            kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        if get_parallel().dcp_enabled:
            plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        _plan_decode(self, wrapper, q_indptr[: bs + 1], kv_indptr, kv_indices, kv_lens)


class VendorFlashInferMLADcpBackend(FlashInferMLAAttnBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode fast_decode_kwargs)
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        assert seq_lens_cpu is not None
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

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (target-verify prefill_wrapper_verify plan)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not (
            forward_batch.forward_mode.is_target_verify() and get_parallel().dcp_enabled
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        global_lens = (forward_batch.seq_lens + draft_token_num).to(torch.int32)
        kv_lens = global_lens.clone()
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(global_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum + bs * draft_token_num,
            dtype=torch.int32,
            device=global_lens.device,
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=global_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        # Shard the verify KV to this rank (kv_lens / kv_indptr / kv_indices).
        n_local = plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(
            torch.full((bs,), draft_token_num, dtype=torch.int32, device=qo_indptr.device),
            dim=0,
        )
        updater = self.indices_updater_prefill
        self.prefill_wrapper_verify.plan(
            metadata=MLAPlanMetadata.csr(
                qo_indptr, kv_indptr[: bs + 1], kv_indices[:n_local], kv_lens
            ),
            num_heads=updater.num_local_heads,
            head_dim_ckv=updater.kv_lora_rank,
            head_dim_kpe=updater.qk_rope_head_dim,
            page_size=1,
            causal=True,
            sm_scale=updater.scaling,
            q_data_type=updater.q_data_type,
            kv_data_type=updater.data_type,
            lse_mode="basee",
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)


class FlashInferMLADcpBackendLocalized(FlashInferMLAAttnBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode fast_decode_kwargs)
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        assert seq_lens_cpu is not None
        dcp_size, dcp_rank = dcp_from_parallel()
        kv_len_arr_cpu = get_dcp_lens(seq_lens_cpu[:bs], dcp_size, dcp_rank).to(
            torch.int32
        )
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

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (target-verify prefill_wrapper_verify plan)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if get_parallel().dcp_enabled and (
            mode.is_target_verify() or mode.is_draft_extend_v2()
        ):
            raise NotImplementedError(
                "flashinfer_mla under DCP: BatchMLAPagedAttentionWrapper takes no "
                "global causal bound, so multi-token queries (target verify / "
                "draft extend) need cutedsl_mla"
            )
        return super().init_forward_metadata(forward_batch)


class FlashInferMLADcpHostLens(FlashInferMLAAttnBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (update_local_kv_lens_for_dcp)
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        host_lens = seq_lens_cpu[:bs]
        # Shard the host lengths in place before the fast plan.
        update_local_kv_lens_for_dcp(host_lens.to(torch.int32))
        kv_len_arr_cpu = host_lens.to(torch.int32)
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


class FlashInferMLADcpHostLensInPlace(FlashInferMLAAttnBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (update_local_kv_lens_for_dcp)
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
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


class FlashInferMLADensePlanBackend(FlashInferMLAAttnBackend):
    """Decode planned through the dense page-table metadata form (CUTLASS)."""

    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.dense_decode_wrapper = BatchMLAPagedAttentionWrapper(
            self.workspace_buffer, backend="cutlass"
        )

    def _dcp_block_table(
        self, forward_batch: ForwardBatch, local_lens: torch.Tensor
    ) -> torch.Tensor:
        dcp_size, dcp_rank = dcp_from_parallel()
        bs = forward_batch.batch_size
        max_pages = triton.cdiv(self.max_context_len, self.page_size * dcp_size)
        table = torch.full((bs, max_pages), -1, dtype=torch.int32, device=self.device)
        v2p = self.kv_index_translator.full_v2p_table
        create_mla_kv_page_table_for_dcp[
            (bs, get_num_kv_index_blocks_flashmla(max_pages, self.page_size))
        ](
            self.req_to_token,
            forward_batch.req_pool_indices,
            local_lens,
            table,
            v2p,
            self.req_to_token.stride(0),
            table.stride(0),
            PHYSICAL_PAGE_SIZE=self.page_size,
            DCP_SIZE=dcp_size,
            DCP_RANK=dcp_rank,
            PAGES_PER_BLOCK=get_num_page_per_block_flashmla(self.page_size),
            HAS_V2P=v2p is not None,
        )
        return table

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (decode plan; FlashInfer 0.7.4 MLAPlanMetadata.dense)
    # expect: SG203
    def plan_decode_dense(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        dcp_size, dcp_rank = dcp_from_parallel()
        seq_lens = forward_batch.seq_lens.to(torch.int32)
        block_tables = self._dcp_block_table(
            forward_batch, to_local(seq_lens, dcp_size, dcp_rank)
        )
        updater = self.indices_updater_decode
        self.dense_decode_wrapper.plan(
            metadata=MLAPlanMetadata.dense(
                self.q_indptr_decode[: bs + 1], block_tables, seq_lens, max_q_len=1
            ),
            num_heads=updater.num_local_heads,
            head_dim_ckv=updater.kv_lora_rank,
            head_dim_kpe=updater.qk_rope_head_dim,
            page_size=self.page_size,
            causal=False,
            sm_scale=updater.scaling,
            q_data_type=updater.data_type,
            kv_data_type=updater.data_type,
            lse_mode="basee",
        )
        self.forward_metadata = DecodeMetadata(self.dense_decode_wrapper)


class FlashInferMLADensePlanBackendLocal(FlashInferMLADensePlanBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (decode plan; FlashInfer 0.7.4 MLAPlanMetadata.dense)
    # expect: clean
    def plan_decode_dense(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        dcp_size, dcp_rank = dcp_from_parallel()
        local_lens = to_local(forward_batch.seq_lens, dcp_size, dcp_rank)
        block_tables = self._dcp_block_table(forward_batch, local_lens)
        updater = self.indices_updater_decode
        self.dense_decode_wrapper.plan(
            metadata=MLAPlanMetadata.dense(
                self.q_indptr_decode[: bs + 1], block_tables, local_lens, max_q_len=1
            ),
            num_heads=updater.num_local_heads,
            head_dim_ckv=updater.kv_lora_rank,
            head_dim_kpe=updater.qk_rope_head_dim,
            page_size=self.page_size,
            causal=False,
            sm_scale=updater.scaling,
            q_data_type=updater.data_type,
            kv_data_type=updater.data_type,
            lse_mode="basee",
        )
        self.forward_metadata = DecodeMetadata(self.dense_decode_wrapper)
