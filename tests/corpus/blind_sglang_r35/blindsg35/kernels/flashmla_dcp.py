"""FlashMLA under decode context parallelism.

``flash_mla_with_kvcache`` takes ``cache_seqlens`` and a tile-scheduler plan
from ``get_mla_metadata``; both must describe this rank's slice.  FlashMLA has
no global causal bound argument, so multi-token queries cannot run under DCP.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch
import triton

from sglang.kernels.ops.attention.dcp_kernels import create_mla_kv_page_table_for_dcp
from sglang.kernels.ops.attention.flash_mla_interface import (
    flash_mla_with_kvcache,
    get_mla_metadata,
)
from sglang.kernels.ops.attention.kv_indices import (
    get_num_kv_index_blocks_flashmla,
    get_num_page_per_block_flashmla,
)
from sglang.srt.layers.attention.flashmla_backend import (
    PAGE_SIZE,
    FlashMLABackend,
    FlashMLADecodeMetadata,
)
from sglang.srt.mem_cache.layout.paged_view import paged_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_server_args

from blindsg35.kernels.dcp_view import DcpView
from blindsg35.kernels.lens import rank_local_lens, rank_local_max, verify_kv_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan

logger = logging.getLogger(__name__)


class CloudFlashMLABackend(FlashMLABackend):
    def __init__(
        self,
        model_runner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        kv_last_page_len_buf: Optional[torch.Tensor] = None,
    ):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, kv_last_page_len_buf)
        self.dcp = DcpView.from_server_args(get_server_args())
        # The DCP decode query is all-gathered across the group.
        self.num_decode_q_heads = self.num_q_heads * self.dcp.size
        self.cuda_graph_seq_lens_k: Optional[torch.Tensor] = None

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int, block_kv_indices=None):
        super().init_cuda_graph_state(max_bs, max_num_tokens, block_kv_indices)
        self.cuda_graph_seq_lens_k = torch.ones(max_bs, dtype=torch.int32, device="cuda")

    def _dcp_block_table(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        local_lens: torch.Tensor,
        out: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if out is None:
            max_pages = triton.cdiv(
                rank_local_max(self.max_context_len, self.dcp), PAGE_SIZE
            )
            out = self._eager_block_kv_indices(bs, max_pages)
        v2p = self.kv_index_translator.full_v2p_table
        create_mla_kv_page_table_for_dcp[
            (bs, get_num_kv_index_blocks_flashmla(out.shape[1], PAGE_SIZE))
        ](
            self.req_to_token,
            req_pool_indices,
            local_lens,
            out,
            v2p,
            self.req_to_token.stride(0),
            out.stride(0),
            PHYSICAL_PAGE_SIZE=PAGE_SIZE,
            DCP_SIZE=self.dcp.size,
            DCP_RANK=self.dcp.rank,
            PAGES_PER_BLOCK=get_num_page_per_block_flashmla(PAGE_SIZE),
            HAS_V2P=v2p is not None,
        )
        return out

    def _q_k_cache(self, q, layer: "RadixAttention", forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        return reshape_q, paged_view(k_cache, PAGE_SIZE)

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.init_forward_metadata
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not self.dcp.enabled or not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        local_lens = rank_local_lens(forward_batch.seq_lens, self.dcp)
        block_kv_indices = self._dcp_block_table(
            bs, forward_batch.req_pool_indices, local_lens
        )
        mla_metadata, num_splits = get_mla_metadata(
            forward_batch.seq_lens.to(torch.int32),
            self.num_decode_q_heads,
            1,
            is_fp8_kvcache=self.is_fp8_kvcache,
        )
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, block_kv_indices, local_lens
        )

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_decode
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
    ):
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, v
            )
        bs = forward_batch.batch_size
        reshape_q, k_cache = self._q_k_cache(q, layer, forward_batch)
        o, lse = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=k_cache,
            block_table=self.forward_metadata.block_kv_indices[:bs],
            cache_seqlens=forward_batch.seq_lens.to(torch.int32),
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=self.forward_metadata.flashmla_metadata,
            num_splits=self.forward_metadata.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        if self.dcp.enabled:
            return o, lse
        return o

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_extend (target verify)
    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
    ):
        if forward_batch.forward_mode == ForwardMode.EXTEND:
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache)
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, v
            )
        bs = forward_batch.batch_size
        reshape_q, k_cache = self._q_k_cache(q, layer, forward_batch)
        # Per-rank slice of the verify window; the block table was built from
        # the same local lengths.
        cache_seqlens = rank_local_lens(
            verify_kv_lens(forward_batch.seq_lens, self.num_draft_tokens), self.dcp
        )
        o, lse = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=k_cache,
            block_table=self.forward_metadata.block_kv_indices[:bs],
            cache_seqlens=cache_seqlens,
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=self.forward_metadata.flashmla_metadata,
            num_splits=self.forward_metadata.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        if self.dcp.enabled:
            return o, lse
        return o

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend._apply_decode_target_verify_metadata
    # expect: clean
    def _apply_decode_target_verify_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: Optional[torch.Tensor],
        forward_mode: ForwardMode,
    ):
        if not self.dcp.enabled or not forward_mode.is_decode_or_idle():
            return super()._apply_decode_target_verify_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_cpu, forward_mode
            )
        local_lens = rank_local_lens(seq_lens[:bs], self.dcp)
        self.cuda_graph_seq_lens_k[:bs].copy_(local_lens)
        self._dcp_block_table(
            bs, req_pool_indices[:bs], local_lens, out=self.cuda_graph_kv_indices[:bs]
        )
        mla_metadata, num_splits = get_mla_metadata(
            self.cuda_graph_seq_lens_k[:bs],
            self.num_decode_q_heads,
            1,
            is_fp8_kvcache=self.is_fp8_kvcache,
        )
        n = mla_metadata.shape[0]
        self.cuda_graph_mla_metadata[:n].copy_(mla_metadata)
        self.cuda_graph_num_splits[: bs + 1].copy_(num_splits)
        self.forward_metadata = FlashMLADecodeMetadata(
            self.cuda_graph_mla_metadata[:n],
            self.cuda_graph_num_splits[: bs + 1],
            self.cuda_graph_kv_indices[:bs],
            self.cuda_graph_seq_lens_k[:bs],
        )


class RegionalFlashMLABackend(CloudFlashMLABackend):
    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.init_forward_metadata
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not self.dcp.enabled or not forward_batch.forward_mode.is_decode_or_idle():
            return FlashMLABackend.init_forward_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        local_lens = rank_local_lens(forward_batch.seq_lens, self.dcp)
        block_kv_indices = self._dcp_block_table(
            bs, forward_batch.req_pool_indices, local_lens
        )
        mla_metadata, num_splits = get_mla_metadata(
            local_lens, self.num_decode_q_heads, 1, is_fp8_kvcache=self.is_fp8_kvcache
        )
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, block_kv_indices, local_lens
        )

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_decode
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
    ):
        if self.is_fp8_kvcache:
            assert not self.dcp.enabled, "FlashMLA does not support DCP for FP8 kv cache"
            return FlashMLABackend.forward_decode(
                self, q, k, v, layer, forward_batch, save_kv_cache
            )
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, v
            )
        bs = forward_batch.batch_size
        reshape_q, k_cache = self._q_k_cache(q, layer, forward_batch)
        metadata = self.forward_metadata
        cache_seqlens = (
            metadata.seq_lens_k[:bs]
            if metadata.seq_lens_k is not None
            else rank_local_lens(forward_batch.seq_lens, self.dcp)
        )
        o, lse = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=k_cache,
            block_table=metadata.block_kv_indices[:bs],
            cache_seqlens=cache_seqlens,
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=metadata.flashmla_metadata,
            num_splits=metadata.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        if self.dcp.enabled:
            return o, lse
        return o

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_extend (target verify)
    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
    ):
        if forward_batch.forward_mode != ForwardMode.EXTEND and self.dcp.enabled:
            raise NotImplementedError(
                "FlashMLA takes no global causal bound; target verify / draft "
                "extend under DCP must use cutedsl_mla"
            )
        return FlashMLABackend.forward_extend(
            self, q, k, v, layer, forward_batch, save_kv_cache
        )

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend._apply_decode_target_verify_metadata
    # expect: SG203
    def _apply_decode_target_verify_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: Optional[torch.Tensor],
        forward_mode: ForwardMode,
    ):
        if not self.dcp.enabled or not forward_mode.is_decode_or_idle():
            return FlashMLABackend._apply_decode_target_verify_metadata(
                self, plan, bs, req_pool_indices, seq_lens, seq_lens_cpu, forward_mode
            )
        local_lens = rank_local_lens(seq_lens[:bs], self.dcp)
        self._dcp_block_table(
            bs, req_pool_indices[:bs], local_lens, out=self.cuda_graph_kv_indices[:bs]
        )
        mla_metadata, num_splits = get_mla_metadata(
            local_lens, self.num_decode_q_heads, 1, is_fp8_kvcache=self.is_fp8_kvcache
        )
        n = mla_metadata.shape[0]
        self.cuda_graph_mla_metadata[:n].copy_(mla_metadata)
        self.cuda_graph_num_splits[: bs + 1].copy_(num_splits)
        # Static K-lens buffer the captured decode binds; refreshed per replay.
        self.cuda_graph_seq_lens_k[:bs].copy_(seq_lens[:bs])
        self.forward_metadata = FlashMLADecodeMetadata(
            self.cuda_graph_mla_metadata[:n],
            self.cuda_graph_num_splits[: bs + 1],
            self.cuda_graph_kv_indices[:bs],
            self.cuda_graph_seq_lens_k[:bs],
        )
