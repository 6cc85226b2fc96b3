"""cute-dsl MLA backends: DCP speculative (verify / draft-extend) support.

``CuteDslMLABackend`` only overrides the single-token decode; the fork adds the
multi-token paths, which the cute-dsl kernel supports through
``causal_seqlens_kv_global``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg17.attn.trtllm_dcp import _Bf16QueryMixin

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


class SpecDcpCuteDslMLABackendV2(_Bf16QueryMixin, CuteDslMLABackend):
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = (
            metadata.global_seq_lens_k
            if metadata.global_seq_lens_k is not None
            else metadata.seq_lens_k
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=forward_batch.seq_lens[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, kv_lens[:bs], layer, bs)

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (parallel.dcp_enabled and forward_batch.forward_mode.is_target_verify()):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        causal = metadata.global_seq_lens_k[:bs]
        kv_lens = metadata.seq_lens_k
        if kv_lens is None or kv_lens.shape[0] < bs:
            # Graph-captured metadata of a smaller bucket: rebuild from the batch.
            kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=causal,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(
            raw_out, lse, kv_lens[:bs], layer, bs, q_len=draft_token_num
        )

    # expect: SG203
    def forward_draft_extend_dcp(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        assert parallel.dcp_enabled and forward_batch.forward_mode.is_draft_extend_v2()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        max_q = max(forward_batch.extend_seq_lens_cpu)
        global_k = (
            forward_batch.seq_lens[:bs] - forward_batch.extend_seq_lens + max_q
        ).to(torch.int32)
        local_k = torch.clamp(global_k, max=metadata.max_seq_len_k)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = k_cache.view(-1, self.page_size, k_cache.shape[-1]).unsqueeze(1)
        query = q.view(bs, max_q, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_k,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, local_k, layer, bs, q_len=max_q)


class SpecDcpCuteDslMLABackend(_Bf16QueryMixin, CuteDslMLABackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = (
            metadata.global_seq_lens_k
            if metadata.global_seq_lens_k is not None
            else forward_batch.seq_lens
        )[:bs]
        kv_lens = (
            metadata.seq_lens_k[:bs]
            if metadata.global_seq_lens_k is not None
            else self._get_dcp_local_seq_lens(global_lens)
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, kv_lens, layer, bs)

    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (parallel.dcp_enabled and forward_batch.forward_mode.is_target_verify()):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        causal = metadata.global_seq_lens_k
        kv_lens = metadata.seq_lens_k
        if kv_lens is None or kv_lens.shape[0] < bs:
            causal = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
            kv_lens = self._get_dcp_local_seq_lens(causal)
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=causal[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(
            raw_out, lse, kv_lens[:bs], layer, bs, q_len=draft_token_num
        )

    # expect: clean
    def forward_draft_extend_dcp(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        assert parallel.dcp_enabled and forward_batch.forward_mode.is_draft_extend_v2()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        max_q = max(forward_batch.extend_seq_lens_cpu)
        global_k = (
            forward_batch.seq_lens[:bs] - forward_batch.extend_seq_lens + max_q
        ).to(torch.int32)
        local_k = self._get_dcp_local_seq_lens(global_k)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = k_cache.view(-1, self.page_size, k_cache.shape[-1]).unsqueeze(1)
        query = q.view(bs, max_q, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_k,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, local_k, layer, bs, q_len=max_q)

    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if cp_world <= 1:
            return super()._run_decode_kernel(
                query,
                kv_cache,
                block_tables,
                seq_lens,
                max_seq_len,
                layer,
                causal_seqs=causal_seqs,
                cp_world=cp_world,
                cp_rank=cp_rank,
                return_lse=return_lse,
            )
        if causal_seqs is None:
            raise ValueError("DCP MLA decode requires the global causal bound")
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32).contiguous(),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=causal_seqs.to(torch.int32).contiguous(),
            return_lse=True,
        )


class StaticOutCuteDslMLABackend(_Bf16QueryMixin, CuteDslMLABackend):
    """Non-DCP decode with a static output buffer; DCP defers to upstream."""

    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if get_parallel().dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
