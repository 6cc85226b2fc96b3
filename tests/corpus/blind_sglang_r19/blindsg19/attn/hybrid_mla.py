"""Hybrid MLA decode: trtllm-gen without DCP, cute-dsl with DCP, chosen per
process from one backend class (the fork's `--attention-backend hybrid_mla`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.jit.utils import is_arch_support_pdl
from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel, get_server_args
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner


class HybridDCPMLABackend(TRTLLMMLABackend):
    # expect: SG203
    def forward_decode(
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
        if self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        query = concat_mla_absorb_q_general(
            q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
        ).unsqueeze(1)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        bs = forward_batch.batch_size

        kernel_kwargs = {
            "query": query,
            "kv_cache": kv_cache,
            "workspace_buffer": self.workspace_buffer,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "block_tables": metadata.block_kv_indices,
            "seq_lens": forward_batch.seq_lens[:bs].to(torch.int32),
            "max_seq_len": metadata.max_seq_len_k,
            "bmm1_scale": self._compute_decode_bmm1_scale(layer),
            "enable_pdl": is_arch_support_pdl(),
        }
        parallel = get_parallel()
        if parallel.dcp_enabled:
            kernel_kwargs.update(
                backend="cute-dsl",
                enable_dcp=True,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                causal_seqlens_kv_global=kernel_kwargs["seq_lens"],
                return_lse=True,
            )
            raw_out, lse = trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)
            out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            lse = lse.view(-1, layer.tp_q_head_num)
            return out.flatten(1), lse
        raw_out = trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class PartialLaunchMLABackend(TRTLLMMLABackend):
    """Binds the static launch arguments once at construction."""

    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.dcp_world = get_server_args().dcp_size
        self._decode_fn = functools.partial(
            trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            backend="cute-dsl",
            enable_pdl=is_arch_support_pdl(),
        )

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        if self.dcp_world > 1:
            seq_lens = metadata.global_seq_lens_k[:bs]
            raw_out, lse = self._decode_fn(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
                enable_dcp=True,
                cp_world=self.dcp_world,
                cp_rank=get_parallel().dcp_rank,
                causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
                return_lse=True,
            )
        else:
            seq_lens = metadata.seq_lens_k[:bs]
            raw_out, lse = self._decode_fn(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
                return_lse=True,
            )
        out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(out, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return out.flatten(1), lse


class PartialLaunchLocalMLABackend(PartialLaunchMLABackend):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        local_seq_lens = metadata.seq_lens_k[:bs]
        kernel_extra = {}
        if self.dcp_world > 1:
            kernel_extra = dict(
                enable_dcp=True,
                cp_world=self.dcp_world,
                cp_rank=get_parallel().dcp_rank,
                causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
            )
        raw_out, lse = self._decode_fn(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
            **kernel_extra,
        )
        out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(out, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return out.flatten(1), lse
