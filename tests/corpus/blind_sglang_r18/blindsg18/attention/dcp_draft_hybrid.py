"""DCP-aware multi-step draft and hybrid (prefill/decode split) MLA backends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.runtime_context import get_parallel

from blindsg18.attention.mla_fork_base import ForkTRTLLMMLABackend
from blindsg18.common.dcp_lens import DcpLens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner


class DraftStepDcpBackend(ForkTRTLLMMLABackend):
    """One EAGLE draft step: the step's write position is ``step_offset``
    tokens past the verified prefix."""

    def __init__(self, model_runner: ModelRunner, step_offset: int = 0, **kwargs):
        super().__init__(model_runner, **kwargs)
        self.step_offset = step_offset

    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        step_lens = (forward_batch.seq_lens[:bs] + self.step_offset).to(torch.int32)
        if get_parallel().dcp_enabled:
            raw_out, lse = self._launch(
                query,
                kv_cache,
                metadata.block_kv_indices,
                step_lens,
                self._get_dcp_local_max_seq_len(self.max_context_len),
                layer,
                return_lse=True,
            )
            return self._finish_rank_local(raw_out, lse, step_lens, layer, bs)
        raw_out = self._launch(
            query, kv_cache, metadata.block_kv_indices, step_lens,
            metadata.max_seq_len_k, layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class DraftStepLocalDcpBackend(ForkTRTLLMMLABackend):
    def __init__(self, model_runner: ModelRunner, step_offset: int = 0, **kwargs):
        super().__init__(model_runner, **kwargs)
        self.step_offset = step_offset

    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        step_lens = self._get_dcp_local_seq_lens(
            forward_batch.seq_lens[:bs] + self.step_offset
        )
        if get_parallel().dcp_enabled:
            raw_out, lse = self._launch(
                query,
                kv_cache,
                metadata.block_kv_indices,
                step_lens,
                self._get_dcp_local_max_seq_len(self.max_context_len),
                layer,
                return_lse=True,
            )
            return self._finish_rank_local(raw_out, lse, step_lens, layer, bs)
        raw_out = self._launch(
            query, kv_cache, metadata.block_kv_indices, step_lens,
            metadata.max_seq_len_k, layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class DcpMultiStepDraftBackend(TRTLLMMLAMultiStepDraftBackend):
    """EAGLE multi-step draft backend whose per-step backends know their
    write offset."""

    def __init__(
        self,
        model_runner: ModelRunner,
        topk: int,
        speculative_num_steps: int,
        local_lens: bool = True,
    ):
        super().__init__(model_runner, topk, speculative_num_steps)
        step_cls = DraftStepLocalDcpBackend if local_lens else DraftStepDcpBackend
        for i in range(self.speculative_num_steps - 1):
            self.attn_backends[i] = step_cls(
                model_runner,
                step_offset=i + 1,
                skip_prefill=True,
                kv_indptr_buf=self.kv_indptr[i],
                q_indptr_decode_buf=self.q_indptr_decode,
            )


class DcpShortcutHybridBackend(HybridAttnBackend):
    """Hybrid backend (FA3 prefill + TRT-LLM MLA decode) that issues the DCP
    decode itself, skipping the decode backend's generic dispatch."""

    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        **kwargs,
    ):
        backend = self.decode_backend
        if not get_parallel().dcp_enabled or not isinstance(backend, ForkTRTLLMMLABackend):
            return backend.forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, **kwargs
            )
        query, kv_cache = backend._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache,
            kwargs.get("q_rope"), kwargs.get("k_rope"),
        )
        metadata = backend._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = backend._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            seq_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return backend._finish_rank_local(raw_out, lse, seq_lens, layer, bs)


class DcpLensHybridBackend(HybridAttnBackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        **kwargs,
    ):
        backend = self.decode_backend
        if not get_parallel().dcp_enabled or not isinstance(backend, ForkTRTLLMMLABackend):
            return backend.forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, **kwargs
            )
        query, kv_cache = backend._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache,
            kwargs.get("q_rope"), kwargs.get("k_rope"),
        )
        metadata = backend._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        lens = DcpLens.from_seq_lens(
            forward_batch.seq_lens[:bs], max_seq_len=self.max_context_len
        )
        raw_out, lse = backend._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            lens.local,
            lens.max_local,
            layer,
            return_lse=True,
        )
        return backend._finish_rank_local(raw_out, lse, lens.local, layer, bs)
