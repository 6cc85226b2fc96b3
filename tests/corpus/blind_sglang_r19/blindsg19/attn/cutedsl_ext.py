"""cute-dsl MLA backend variants used on the fork's DCP deployments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def _verify_query(q, q_rope, layer, bs: int, tokens_per_req: int):
    if q_rope is not None:
        q = concat_mla_absorb_q_general(
            q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
        )
    return q.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)


class TunedCuteDslMLABackend(CuteDslMLABackend):
    """cute-dsl with the modular implementation pinned (sinks models)."""

    # expect: SG203
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
            raise ValueError("causal_seqs is required for DCP MLA decode")
        # The modular kernel clamps each request to this rank's cyclic share
        # from the global causal length itself.
        kv_lens = causal_seqs.to(torch.int32)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=kv_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            cute_dsl_impl="modular",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=kv_lens,
            return_lse=True,
        )


class KwargsCuteDslMLABackend(CuteDslMLABackend):
    """cute-dsl that assembles the launch from a kwargs dict so the softmax
    skip threshold can be dropped per request class."""

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
        kernel_kwargs = dict(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            return_lse=return_lse,
        )
        threshold = envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get()
        if threshold is not None:
            kernel_kwargs["skip_softmax_threshold_scale_factor"] = threshold
        if cp_world > 1:
            if causal_seqs is None:
                raise ValueError("DCP MLA decode needs the global causal lengths")
            kernel_kwargs.update(
                enable_dcp=True,
                cp_world=cp_world,
                cp_rank=cp_rank,
                causal_seqlens_kv_global=causal_seqs.to(torch.int32),
                return_lse=True,
            )
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            **kernel_kwargs
        )


class CuteDslVerifyMLABackend(CuteDslMLABackend):
    """cute-dsl with an explicit DCP target-verify path."""

    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (
            forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled
        ) or self.data_type == torch.float8_e4m3fn:
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = _verify_query(q, q_rope, layer, bs, ndt).to(self.data_type)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        out = raw_out.view(bs * ndt, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * ndt, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            out, lse, metadata.seq_lens_k[:bs], self._dense_q_indptr(bs, ndt), ndt
        )
        return out.flatten(1), lse


class CuteDslDraftExtendMLABackend(CuteDslMLABackend):
    """cute-dsl deployment whose draft-extend goes through trtllm-gen's varlen
    launch (the monolithic cute-dsl kernel wants a fixed q_len)."""

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        metadata = forward_batch.decode_trtllm_mla_metadata
        if q_rope is not None:
            q = concat_mla_absorb_q_general(
                q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
                q_rope.view(
                    -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
                ),
            )
        query = q.view(-1, layer.tp_q_head_num, layer.head_dim).to(self.data_type)

        dcp = get_parallel().dcp_enabled
        result = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            # Rank-local under DCP (init_forward_metadata localises them).
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + metadata.max_seq_len_q,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="trtllm-gen",
            cum_seq_lens_q=metadata.cu_seqlens_q,
            max_q_len=metadata.max_seq_len_q,
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = result
            out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            return out.flatten(1), lse.view(-1, layer.tp_q_head_num)
        return result.view(-1, layer.tp_q_head_num * layer.v_head_dim)
