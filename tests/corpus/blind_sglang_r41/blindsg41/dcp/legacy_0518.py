"""0.5.18-era MLA backend code paths kept by the fork.

In 0.5.18 the TRT-LLM MLA metadata carried the *global* KV lengths in
``seq_lens_k`` (``global_seq_lens_k`` was a copy) and FlashMLA read
``forward_batch.seq_lens`` directly. The page tables below come from 0.5.23
helpers, which are rank-local under DCP.
"""

from __future__ import annotations

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
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.mem_cache.layout.paged_view import paged_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg41.common.dcp_lens import local_page_table, to_local

if is_flashinfer_available():
    import flashinfer


class Legacy0518TRTLLMMLA(TRTLLMMLABackend):
    def _init_metadata_0518(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        bs = forward_batch.batch_size
        max_seq = int(forward_batch.seq_lens_cpu.max().item())
        seq_lens = forward_batch.seq_lens
        if forward_batch.forward_mode.is_target_verify():
            max_seq += self.num_draft_tokens
            seq_lens = seq_lens + self.num_draft_tokens
        md = TRTLLMMLADecodeMetadata()
        md.seq_lens_k = seq_lens.to(torch.int32)
        md.global_seq_lens_k = md.seq_lens_k
        md.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        md.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        md.batch_size = bs
        forward_batch.decode_trtllm_mla_metadata = md
        return md

    def _cute(self, q, kv_cache, md, seq_lens, causal, layer):
        parallel = get_parallel()
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=md.block_kv_indices,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=md.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=causal.to(torch.int32),
            return_lse=True,
        )

    # expect: SG203
    def forward_verify_0518(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_target_verify()
        md = self._init_metadata_0518(forward_batch)
        bs = forward_batch.batch_size
        q = q.to(self.data_type).view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        if not get_parallel().dcp_enabled:
            out = self._run_decode_kernel(
                q, kv_cache, md.block_kv_indices, md.seq_lens_k,
                md.max_seq_len_k, layer,
            )
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = self._cute(
            q, kv_cache, md, md.seq_lens_k, md.global_seq_lens_k, layer
        )
        return raw_out.flatten(2).flatten(0, 1), lse

    # expect: clean
    def forward_verify_0518_rebased(
        self, q, kv_cache, layer, forward_batch: ForwardBatch
    ):
        assert forward_batch.forward_mode.is_target_verify()
        md = self._init_metadata_0518(forward_batch)
        bs = forward_batch.batch_size
        q = q.to(self.data_type).view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        if not get_parallel().dcp_enabled:
            out = self._run_decode_kernel(
                q, kv_cache, md.block_kv_indices, md.seq_lens_k,
                md.max_seq_len_k, layer,
            )
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        local_lens = self._get_dcp_local_seq_lens(md.seq_lens_k)
        raw_out, lse = self._cute(
            q, kv_cache, md, local_lens, md.global_seq_lens_k, layer
        )
        return raw_out.flatten(2).flatten(0, 1), lse

    # expect: SG203
    def forward_decode_0518(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        self.init_forward_metadata(forward_batch)
        metadata = forward_batch.decode_trtllm_mla_metadata
        if query.dim() == 3:
            query = query.unsqueeze(1)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )

    # expect: clean
    def forward_decode_0518_compat(
        self, query, kv_cache, layer, forward_batch: ForwardBatch
    ):
        assert forward_batch.forward_mode.is_decode_or_idle()
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "the 0.5.18 decode path predates DCP; use forward_decode"
            )
        self.init_forward_metadata(forward_batch)
        metadata = forward_batch.decode_trtllm_mla_metadata
        if query.dim() == 3:
            query = query.unsqueeze(1)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )

    # expect: SG203
    def forward_draft_extend_0518(
        self, q, kv_cache, layer, forward_batch: ForwardBatch
    ):
        assert forward_batch.forward_mode.is_draft_extend_v2()
        self.init_forward_metadata(forward_batch)
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        total_tokens = q.shape[0]
        tokens_per_seq = total_tokens // bs
        q = q.to(self.data_type).view(
            bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim
        )
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return raw_out.view(total_tokens, -1)

    # expect: clean
    def forward_draft_extend_0518_compat(
        self, q, kv_cache, layer, forward_batch: ForwardBatch
    ):
        assert forward_batch.forward_mode.is_draft_extend_v2()
        bs = forward_batch.batch_size
        total_tokens = q.shape[0]
        tokens_per_seq = total_tokens // bs
        if get_parallel().dcp_enabled and tokens_per_seq > 1:
            raise NotImplementedError(
                "multi-token draft extend under DCP needs a global causal bound"
            )
        self.init_forward_metadata(forward_batch)
        metadata = forward_batch.decode_trtllm_mla_metadata
        q = q.to(self.data_type).view(
            bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim
        )
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return raw_out.view(total_tokens, -1)


class Legacy0518FlashMLA(FlashMLABackend):
    def _plan_0518(self, forward_batch: ForwardBatch) -> FlashMLADecodeMetadata:
        max_k = int(forward_batch.seq_lens_cpu.max().item())
        lens = to_local(forward_batch.seq_lens)
        block_kv_indices = local_page_table(
            self.req_to_token,
            forward_batch.req_pool_indices,
            lens,
            triton.cdiv(max_k, PAGE_SIZE),
            PAGE_SIZE,
        )
        mla_metadata, num_splits = get_mla_metadata(lens, self.num_q_heads, 1)
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, block_kv_indices, lens
        )
        return self.forward_metadata

    # expect: SG203
    def forward_decode_0518(
        self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True
    ):
        assert forward_batch.forward_mode.is_decode_or_idle()
        md = self._plan_0518(forward_batch)
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        o, lse = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=paged_view(k_cache, PAGE_SIZE),
            block_table=md.block_kv_indices[:bs],
            cache_seqlens=forward_batch.seq_lens.to(torch.int32),
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=md.flashmla_metadata,
            num_splits=md.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        if get_parallel().dcp_enabled:
            return o, lse
        return o

    # expect: clean
    def forward_decode_0518_meta(
        self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True
    ):
        assert forward_batch.forward_mode.is_decode_or_idle()
        md = self._plan_0518(forward_batch)
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        o, lse = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=paged_view(k_cache, PAGE_SIZE),
            block_table=md.block_kv_indices[:bs],
            cache_seqlens=md.seq_lens_k,
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=md.flashmla_metadata,
            num_splits=md.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        if get_parallel().dcp_enabled:
            return o, lse
        return o
