"""FlashMLA backend fork with a decode-context-parallel decode path.

Under DCP each rank keeps a compact cyclic slice of every request; the
FlashMLA kernel is driven with that rank's page table
(``create_mla_kv_page_table_for_dcp``) and returns ``(o, lse)`` for the
cross-rank merge.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton

from sglang.kernels.ops.attention.flash_mla_interface import (
    flash_mla_with_kvcache,
    get_mla_metadata,
)
from sglang.srt.layers.attention.flashmla_backend import (
    PAGE_SIZE,
    FlashMLABackend,
    FlashMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import update_local_kv_lens_for_dcp
from sglang.srt.mem_cache.layout.paged_view import paged_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg41.common.dcp_lens import local_page_table, to_local


class ForkFlashMLABackend(FlashMLABackend):
    def _max_pages(self, forward_batch: ForwardBatch, extra: int = 0) -> int:
        max_k = (
            int(forward_batch.seq_lens_cpu.max().item())
            if forward_batch.seq_lens_cpu is not None
            else self.max_context_len
        )
        return triton.cdiv(max_k + extra, PAGE_SIZE)

    def _dcp_plan(
        self,
        forward_batch: ForwardBatch,
        global_lens: torch.Tensor,
        q_tokens: int = 1,
    ) -> Tuple[FlashMLADecodeMetadata, torch.Tensor]:
        local_lens = to_local(global_lens)
        block_kv_indices = local_page_table(
            self.req_to_token,
            forward_batch.req_pool_indices,
            local_lens,
            self._max_pages(forward_batch, q_tokens - 1),
            PAGE_SIZE,
        )
        mla_metadata, num_splits = get_mla_metadata(
            local_lens, q_tokens * self.num_q_heads, 1, is_fp8_kvcache=False
        )
        md = FlashMLADecodeMetadata(mla_metadata, num_splits, block_kv_indices, local_lens)
        return md, local_lens

    def _save(self, layer, forward_batch, k, v, save_kv_cache: bool):
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, v
            )

    def _launch(self, q, layer, md: FlashMLADecodeMetadata, cache_seqlens, bs):
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        o, lse = flash_mla_with_kvcache(
            q=q,
            k_cache=paged_view(k_cache, PAGE_SIZE),
            block_table=md.block_kv_indices[:bs],
            cache_seqlens=cache_seqlens,
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=md.flashmla_metadata,
            num_splits=md.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse

    # expect: clean
    def init_dcp_decode_metadata(self, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        local_lens = to_local(forward_batch.seq_lens)
        block_kv_indices = local_page_table(
            self.req_to_token,
            forward_batch.req_pool_indices,
            local_lens,
            self._max_pages(forward_batch),
            PAGE_SIZE,
        )
        mla_metadata, num_splits = get_mla_metadata(
            local_lens, self.num_q_heads, 1, is_fp8_kvcache=self.is_fp8_kvcache
        )
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, block_kv_indices, local_lens
        )

    # expect: SG203
    def init_dcp_decode_schedule(self, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        local_lens = to_local(forward_batch.seq_lens)
        block_kv_indices = local_page_table(
            self.req_to_token,
            forward_batch.req_pool_indices,
            local_lens,
            self._max_pages(forward_batch),
            PAGE_SIZE,
        )
        seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        mla_metadata, num_splits = get_mla_metadata(
            seq_lens_k, self.num_q_heads, 1, is_fp8_kvcache=self.is_fp8_kvcache
        )
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, block_kv_indices, seq_lens_k
        )

    # expect: SG203
    def forward_decode_dcp(
        self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True
    ):
        assert forward_batch.forward_mode.is_decode_or_idle()
        self._save(layer, forward_batch, k, v, save_kv_cache)
        bs = forward_batch.batch_size
        md, _local = self._dcp_plan(forward_batch, forward_batch.seq_lens)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        o, lse = self._launch(
            reshape_q, layer, md, forward_batch.seq_lens.to(torch.int32), bs
        )
        return (o, lse) if get_parallel().dcp_enabled else o

    # expect: clean
    def forward_decode_dcp_planned(
        self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True
    ):
        assert forward_batch.forward_mode.is_decode_or_idle()
        self._save(layer, forward_batch, k, v, save_kv_cache)
        bs = forward_batch.batch_size
        md, local_lens = self._dcp_plan(forward_batch, forward_batch.seq_lens)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        o, lse = self._launch(reshape_q, layer, md, local_lens, bs)
        return (o, lse) if get_parallel().dcp_enabled else o

    # expect: SG203
    def forward_verify_dcp(
        self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True
    ):
        assert forward_batch.forward_mode.is_target_verify()
        self._save(layer, forward_batch, k, v, save_kv_cache)
        bs = forward_batch.batch_size
        ndt = self.num_draft_tokens
        md, local_lens = self._dcp_plan(
            forward_batch, forward_batch.seq_lens + ndt, q_tokens=ndt
        )
        reshape_q = q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        o, lse = self._launch(reshape_q, layer, md, local_lens, bs)
        return (o, lse) if get_parallel().dcp_enabled else o

    # expect: clean
    def forward_verify_single_rank(
        self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True
    ):
        assert forward_batch.forward_mode.is_target_verify()
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "FlashMLA has no global causal bound for a DCP verify window"
            )
        return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache)

    # expect: SG203
    def forward_decode_dcp_inplace(
        self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True
    ):
        assert forward_batch.forward_mode.is_decode_or_idle()
        self._save(layer, forward_batch, k, v, save_kv_cache)
        bs = forward_batch.batch_size
        lens = to_local(forward_batch.seq_lens)
        update_local_kv_lens_for_dcp(lens)
        block_kv_indices = local_page_table(
            self.req_to_token,
            forward_batch.req_pool_indices,
            lens,
            self._max_pages(forward_batch),
            PAGE_SIZE,
        )
        mla_metadata, num_splits = get_mla_metadata(lens, self.num_q_heads, 1)
        md = FlashMLADecodeMetadata(mla_metadata, num_splits, block_kv_indices, lens)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        o, lse = self._launch(reshape_q, layer, md, lens, bs)
        return (o, lse) if get_parallel().dcp_enabled else o

    # expect: clean
    def forward_decode_inplace_lens(
        self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True
    ):
        assert forward_batch.forward_mode.is_decode_or_idle()
        self._save(layer, forward_batch, k, v, save_kv_cache)
        bs = forward_batch.batch_size
        lens = forward_batch.seq_lens.to(torch.int32).clone()
        update_local_kv_lens_for_dcp(lens)
        block_kv_indices = local_page_table(
            self.req_to_token,
            forward_batch.req_pool_indices,
            lens,
            self._max_pages(forward_batch),
            PAGE_SIZE,
        )
        mla_metadata, num_splits = get_mla_metadata(lens, self.num_q_heads, 1)
        md = FlashMLADecodeMetadata(mla_metadata, num_splits, block_kv_indices, lens)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        o, lse = self._launch(reshape_q, layer, md, lens, bs)
        return (o, lse) if get_parallel().dcp_enabled else o
