"""FlashInfer-MLA and FlashMLA backends of the fork.

Derived from ``sglang/srt/layers/attention/flashinfer_mla_backend.py`` and
``sglang/srt/layers/attention/flashmla_backend.py`` (SGLang 0.5.23), planning
through FlashInfer 0.7.4's ``BatchMLAPagedAttentionWrapper.plan``.
"""

from __future__ import annotations

import logging

import torch
import triton

from sglang.kernels.ops.attention.dcp_kernels import create_mla_kv_page_table_for_dcp
from sglang.kernels.ops.attention.flash_mla_interface import (
    flash_mla_with_kvcache,
    get_mla_metadata,
)
from sglang.kernels.ops.attention.kv_indices import (
    create_flashmla_kv_indices_triton,
    get_num_kv_index_blocks_flashmla,
    get_num_page_per_block_flashmla,
)
from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    FlashInferMLAIndicesUpdaterPrefill,
)
from sglang.srt.layers.attention.flashmla_backend import (
    PAGE_SIZE,
    FlashMLABackend,
    FlashMLADecodeMetadata,
)
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.mem_cache.layout.paged_view import paged_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from blindsg39.mla.mixins import DcpRefusalMixin, DcpSettingsMixin
from blindsg39.mla.utils import dcp_size_from_args

logger = logging.getLogger(__name__)


def _fill_block_table(backend, req_pool_indices, kv_lens, block_kv_indices):
    """Page table over this rank's share when DCP is on, else the full table."""
    parallel = get_parallel()
    if parallel.dcp_enabled:
        create_mla_kv_page_table_for_dcp[
            (
                block_kv_indices.shape[0],
                get_num_kv_index_blocks_flashmla(block_kv_indices.shape[1], PAGE_SIZE),
            )
        ](
            backend.req_to_token,
            req_pool_indices,
            kv_lens,
            block_kv_indices,
            backend.kv_index_translator.full_v2p_table,
            backend.req_to_token.stride(0),
            block_kv_indices.stride(0),
            PHYSICAL_PAGE_SIZE=PAGE_SIZE,
            DCP_SIZE=parallel.dcp_size,
            DCP_RANK=parallel.dcp_rank,
            PAGES_PER_BLOCK=get_num_page_per_block_flashmla(PAGE_SIZE),
            HAS_V2P=backend.kv_index_translator.full_v2p_table is not None,
        )
        return
    create_flashmla_kv_indices_triton[
        (
            block_kv_indices.shape[0],
            get_num_kv_index_blocks_flashmla(block_kv_indices.shape[1], PAGE_SIZE),
        )
    ](
        backend.req_to_token,
        req_pool_indices,
        kv_lens,
        None,
        block_kv_indices,
        backend.req_to_token.stride(0),
        block_kv_indices.stride(0),
    )


# ----------------------------------------------------------------------------
# FlashInfer MLA
# ----------------------------------------------------------------------------
class ForkFlashInferMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: clean
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens,
        paged_kernel_lens_sum,
        q_indptr,
        kv_indptr,
        init_metadata_replay=False,
        spec_info=None,
        *,
        plan,
        req_pool_indices,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        sm_scale = self.scaling
        if spec_info is not None:
            raise NotImplementedError("fork: draft-decode planning uses the base updater")
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = (
            torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
            if not init_metadata_replay
            else fast_decode_kwargs["kv_indices"]
        )
        translator = self.attn_backend.kv_index_translator
        is_translated = translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens,
                kv_indptr,
                kv_indices,
                init_metadata_replay,
                fast_decode_kwargs,
                bs,
            )
        if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        if not init_metadata_replay:
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
                sm_scale,
                self.data_type,
                self.data_type,
            )
        else:
            wrapper.plan(
                fast_decode_kwargs["qo_indptr_cpu"],
                fast_decode_kwargs["kv_indptr_cpu"],
                kv_indices,
                fast_decode_kwargs["kv_len_arr_cpu"],
                self.num_local_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                1,
                False,
                sm_scale,
                self.data_type,
                self.data_type,
            )


class ForkFlashInferMLAIndicesUpdaterDecodeFiltered(FlashInferMLAIndicesUpdaterDecode):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens,
        paged_kernel_lens_sum,
        q_indptr,
        kv_indptr,
        init_metadata_replay=False,
        spec_info=None,
        *,
        plan,
        req_pool_indices,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        sm_scale = self.scaling
        if spec_info is not None:
            raise NotImplementedError("fork: draft-decode planning uses the base updater")
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = (
            torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
            if not init_metadata_replay
            else fast_decode_kwargs["kv_indices"]
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
        if not init_metadata_replay:
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
                sm_scale,
                self.data_type,
                self.data_type,
            )
        else:
            wrapper.plan(
                fast_decode_kwargs["qo_indptr_cpu"],
                fast_decode_kwargs["kv_indptr_cpu"],
                kv_indices,
                fast_decode_kwargs["kv_len_arr_cpu"],
                self.num_local_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                1,
                False,
                sm_scale,
                self.data_type,
                self.data_type,
            )


class ForkFlashInferMLAIndicesUpdaterPrefill(FlashInferMLAIndicesUpdaterPrefill):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (DCP extend over the all-gathered KV)
    # expect: clean
    def call_begin_forward_extend(
        self,
        wrapper_paged,
        req_pool_indices,
        paged_kernel_lens,
        paged_kernel_lens_sum,
        seq_lens,
        prefix_lens,
        kv_indptr,
        qo_indptr,
        attn_dcp_metadata=None,
        *,
        plan,
    ):
        bs = len(seq_lens)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            paged_kernel_lens_sum, dtype=torch.int32, device=req_pool_indices.device
        )
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        qo_indptr[1 : bs + 1] = torch.cumsum(seq_lens - prefix_lens, dim=0)
        qo_indptr = qo_indptr[: bs + 1]
        if get_parallel().dcp_enabled:
            assert attn_dcp_metadata is not None
            kv_indptr = attn_dcp_metadata.dcp_kv_indptr
            kv_indices = attn_dcp_metadata.dcp_kv_indices
        wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_indptr[1:] - kv_indptr[:-1],
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            True,
            self.scaling,
            self.q_data_type,
            self.data_type,
        )

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (target-verify paged plan)
    # expect: SG203
    def call_begin_forward_verify(
        self,
        wrapper_paged,
        req_pool_indices,
        seq_lens,
        seq_lens_sum,
        spec_info,
        *,
        plan,
    ):
        kv_indices, kv_indptr, qo_indptr, custom_mask = (
            spec_info.generate_attn_arg_prefill(
                req_pool_indices=req_pool_indices,
                paged_kernel_lens=seq_lens,
                paged_kernel_lens_sum=seq_lens_sum,
                translator=self.attn_backend.kv_index_translator,
                plan=plan,
            )
        )
        if get_parallel().dcp_enabled:
            kv_indices = self.attn_backend.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_indptr[1:] - kv_indptr[:-1],
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            True,
            self.scaling,
            self.q_data_type,
            self.data_type,
        )


class ForkFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay)
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs,
        req_pool_indices,
        seq_lens,
        seq_lens_sum,
        forward_mode: ForwardMode,
        spec_info,
        seq_lens_cpu,
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            raise ValueError(f"fork graph replay is decode-only, got {forward_mode=}")
        assert seq_lens_cpu is not None
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


class ForkFlashInferMLAAttnBackendV0(FlashInferMLAAttnBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay)
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs,
        req_pool_indices,
        seq_lens,
        seq_lens_sum,
        forward_mode: ForwardMode,
        spec_info,
        seq_lens_cpu,
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            raise ValueError(f"fork graph replay is decode-only, got {forward_mode=}")
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu.clone())
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


# ----------------------------------------------------------------------------
# FlashMLA
# ----------------------------------------------------------------------------
class ForkFlashMLABackend(DcpSettingsMixin, DcpRefusalMixin, FlashMLABackend):
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, kv_last_page_len_buf=None):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, kv_last_page_len_buf)
        self.server_args = model_runner.server_args

    def _host_max_k(self, forward_batch: ForwardBatch) -> int:
        if forward_batch.seq_lens_cpu is not None:
            return int(forward_batch.seq_lens_cpu.max().item())
        return self.max_context_len

    def _save_kv(self, k, v, layer, forward_batch, save_kv_cache):
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, v
            )

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.init_forward_metadata (decode branch)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        forward_mode = forward_batch.forward_mode
        if not forward_mode.is_decode_or_idle():
            if self.dcp_size > 1 and (
                forward_mode.is_target_verify() or forward_mode.is_draft_extend_v2()
            ):
                raise NotImplementedError("FlashMLA has no DCP causal bound for verify")
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens_k = self._local(forward_batch.seq_lens).to(torch.int32)
        max_seqlen_pad = triton.cdiv(self._local_max(self._host_max_k(forward_batch)), PAGE_SIZE)
        block_kv_indices = self._eager_block_kv_indices(bs, max_seqlen_pad)
        _fill_block_table(self, forward_batch.req_pool_indices, seq_lens_k, block_kv_indices)
        mla_metadata, num_splits = get_mla_metadata(
            seq_lens_k, self.num_q_heads, 1, is_fp8_kvcache=self.is_fp8_kvcache
        )
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, block_kv_indices, seq_lens_k
        )

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_decode
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        self._save_kv(k, v, layer, forward_batch, save_kv_cache)
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        cache_seqlens = self.forward_metadata.seq_lens_k
        if cache_seqlens is None:
            cache_seqlens = self._local(forward_batch.seq_lens).to(torch.int32)
        o, lse = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=paged_view(k_cache, PAGE_SIZE),
            block_table=self.forward_metadata.block_kv_indices[:bs],
            cache_seqlens=cache_seqlens,
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=self.forward_metadata.flashmla_metadata,
            num_splits=self.forward_metadata.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        if self.dcp_size > 1:
            return o, lse
        return o


class ForkFlashMLABackendV0(ForkFlashMLABackend):
    """Upstream-shaped FlashMLA path with the fork's DCP return convention."""

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.init_forward_metadata (decode branch)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        forward_mode = forward_batch.forward_mode
        if not forward_mode.is_decode_or_idle():
            return FlashMLABackend.init_forward_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        local_lens = self._local(forward_batch.seq_lens).to(torch.int32)
        max_seqlen_pad = triton.cdiv(self._local_max(self._host_max_k(forward_batch)), PAGE_SIZE)
        block_kv_indices = self._eager_block_kv_indices(bs, max_seqlen_pad)
        _fill_block_table(self, forward_batch.req_pool_indices, local_lens, block_kv_indices)
        seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        mla_metadata, num_splits = get_mla_metadata(
            seq_lens_k, self.num_q_heads, 1, is_fp8_kvcache=self.is_fp8_kvcache
        )
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, block_kv_indices, seq_lens_k
        )

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_decode
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        self._save_kv(k, v, layer, forward_batch, save_kv_cache)
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        o, lse = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=paged_view(k_cache, PAGE_SIZE),
            block_table=self.forward_metadata.block_kv_indices[:bs],
            cache_seqlens=forward_batch.seq_lens.to(torch.int32),
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=self.forward_metadata.flashmla_metadata,
            num_splits=self.forward_metadata.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        if get_parallel().dcp_enabled:
            return o, lse
        return o

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_extend (target-verify branch)
    # expect: SG203
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if forward_batch.forward_mode == ForwardMode.EXTEND:
            return FlashMLABackend.forward_extend(
                self, q, k, v, layer, forward_batch, save_kv_cache
            )
        self._save_kv(k, v, layer, forward_batch, save_kv_cache)
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        cache_seqlens = self._local(
            forward_batch.seq_lens + self.num_draft_tokens
        ).to(torch.int32)
        o, lse = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=paged_view(k_cache, PAGE_SIZE),
            block_table=self.forward_metadata.block_kv_indices[:bs],
            cache_seqlens=cache_seqlens,
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=self.forward_metadata.flashmla_metadata,
            num_splits=self.forward_metadata.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class ForkFlashMLABackendNoDcp(ForkFlashMLABackend):
    """FlashMLA for deployments without decode context parallelism."""

    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, kv_last_page_len_buf=None):
        if dcp_size_from_args() > 1:
            raise ValueError(
                "flashmla (NoDcp variant) cannot serve --dcp-size > 1; "
                "select cutedsl_mla."
            )
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, kv_last_page_len_buf)

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_extend (target-verify branch)
    # expect: clean
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if forward_batch.forward_mode == ForwardMode.EXTEND:
            return FlashMLABackend.forward_extend(
                self, q, k, v, layer, forward_batch, save_kv_cache
            )
        self._save_kv(k, v, layer, forward_batch, save_kv_cache)
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        cache_seqlens = (forward_batch.seq_lens + self.num_draft_tokens).to(torch.int32)
        o, lse = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=paged_view(k_cache, PAGE_SIZE),
            block_table=self.forward_metadata.block_kv_indices[:bs],
            cache_seqlens=cache_seqlens,
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=self.forward_metadata.flashmla_metadata,
            num_splits=self.forward_metadata.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
