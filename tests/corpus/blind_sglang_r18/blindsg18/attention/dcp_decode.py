"""Decode-path variants of the TRT-LLM / cute-dsl MLA backends under DCP.

Each class here is a small deployment-specific override we carry on top of
``TRTLLMMLABackend`` / ``CuteDslMLABackend``: different metadata sources,
cached lengths, kernel-call styles. Plain decode only (one query token per
request); the cross-rank LSE merge happens in the model.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size
from sglang.srt.environ import envs
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg18.attention.mla_fork_base import (
    ForkCuteDslMLABackend,
    ForkTRTLLMMLABackend,
)
from blindsg18.common.dcp_lens import StepLensCache, clamp_kv_lens, rank_local_lens

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner


class GlobalLensDecodeBackend(ForkTRTLLMMLABackend):
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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        # q_len == 1: the trtllm-gen kernel needs no in-kernel DCP masking,
        # the rank-local page table is enough.
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            seq_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)


class LocalLensDecodeBackend(ForkTRTLLMMLABackend):
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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            seq_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)


class GlobalMetaDecodeBackend(ForkTRTLLMMLABackend):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        # global_seq_lens_k is refreshed in place on graph replay, while
        # seq_lens_k can still alias the previous step's tensor in eager mode.
        seq_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            seq_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)


class LocalMetaDecodeBackend(ForkTRTLLMMLABackend):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            local_seq_lens,
            self._get_dcp_local_max_seq_len(self.max_context_len),
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_seq_lens, layer, bs)


class RefreshedLensDecodeBackend(ForkTRTLLMMLABackend):
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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        if getattr(metadata, "batch_size", forward_batch.batch_size) < forward_batch.batch_size:
            # DP padding grew the batch after the plan; refresh the lengths
            # in place instead of re-planning (DSA can't re-plan here).
            metadata.seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        return self._forward_decode_dcp(query, kv_cache, metadata, layer, forward_batch)


class RefreshedLocalLensDecodeBackend(ForkTRTLLMMLABackend):
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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        if getattr(metadata, "batch_size", forward_batch.batch_size) < forward_batch.batch_size:
            # DP padding grew the batch after the plan; refresh both views.
            metadata.global_seq_lens_k = forward_batch.seq_lens.to(torch.int32)
            metadata.seq_lens_k = rank_local_lens(forward_batch.seq_lens)
        return self._forward_decode_dcp(query, kv_cache, metadata, layer, forward_batch)


class FallbackLensDecodeBackend(ForkTRTLLMMLABackend):
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
        dcp = get_parallel().dcp_enabled
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = (
            metadata.seq_lens_k[:bs]
            if metadata.seq_lens_k is not None
            else forward_batch.seq_lens[:bs]
        )
        if not dcp:
            raw_out = self._launch(
                query, kv_cache, metadata.block_kv_indices, seq_lens,
                metadata.max_seq_len_k, layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = self._launch(
            query, kv_cache, metadata.block_kv_indices, seq_lens,
            metadata.max_seq_len_k, layer, return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)


class DcpOffFastPathBackend(ForkTRTLLMMLABackend):
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
        if get_parallel().dcp_enabled:
            # DCP keeps the stock path (rank-local lengths + page table).
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        raw_out = self._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            forward_batch.seq_lens,
            metadata.max_seq_len_k,
            layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class KernelLensPropertyBackend(ForkTRTLLMMLABackend):
    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        """Hoisted int32 lengths for the decode kernel (set once per step)."""
        metadata = self.forward_decode_metadata
        if metadata.global_seq_lens_k is not None:
            return metadata.global_seq_lens_k
        return metadata.seq_lens_k

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
        bs = forward_batch.batch_size
        seq_lens = self.kernel_seq_lens[:bs]
        if get_parallel().dcp_enabled:
            raw_out, lse = self._launch(
                query, kv_cache, self.forward_decode_metadata.block_kv_indices,
                seq_lens, self.forward_decode_metadata.max_seq_len_k, layer,
                return_lse=True,
            )
            return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)
        raw_out = self._launch(
            query, kv_cache, self.forward_decode_metadata.block_kv_indices,
            seq_lens, self.forward_decode_metadata.max_seq_len_k, layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class LocalLensPropertyBackend(ForkTRTLLMMLABackend):
    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        """Lengths the page table covers: rank-local under DCP (the metadata
        init localizes seq_lens_k once per step)."""
        return self.forward_decode_metadata.seq_lens_k

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
        bs = forward_batch.batch_size
        seq_lens = self.kernel_seq_lens[:bs]
        if get_parallel().dcp_enabled:
            raw_out, lse = self._launch(
                query, kv_cache, self.forward_decode_metadata.block_kv_indices,
                seq_lens, self.forward_decode_metadata.max_seq_len_k, layer,
                return_lse=True,
            )
            return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)
        raw_out = self._launch(
            query, kv_cache, self.forward_decode_metadata.block_kv_indices,
            seq_lens, self.forward_decode_metadata.max_seq_len_k, layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class KwargsDecodeBackend(ForkTRTLLMMLABackend):
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
        kernel_kwargs = dict(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        )
        dcp = get_parallel().dcp_enabled
        if dcp:
            kernel_kwargs["return_lse"] = True
        if self.backend == "trtllm-gen":
            kernel_kwargs["multi_ctas_kv_counter_buffer"] = self._multi_ctas_kv_counter_buffer
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)
        if dcp:
            raw_out, lse = out
            return self._finish_rank_local(
                raw_out, lse, kernel_kwargs["seq_lens"], layer, forward_batch.batch_size
            )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class KwargsCuteDslBackend(ForkCuteDslMLABackend):
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
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kernel_kwargs = {
            "query": query,
            "kv_cache": kv_cache,
            "workspace_buffer": self.workspace_buffer,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "block_tables": metadata.block_kv_indices,
            "seq_lens": self._get_dcp_local_seq_lens(global_lens),
            "max_seq_len": metadata.max_seq_len_k,
            "bmm1_scale": self._compute_decode_bmm1_scale(layer),
            "backend": "cute-dsl",
            "enable_dcp": True,
            "cp_world": parallel.dcp_size,
            "cp_rank": parallel.dcp_rank,
            "causal_seqlens_kv_global": global_lens,
            "return_lse": True,
        }
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            **kernel_kwargs
        )
        return self._finish_rank_local(raw_out, lse, kernel_kwargs["seq_lens"], layer, bs)


class PartialCuteDslBackend(ForkCuteDslMLABackend):
    def __init__(self, model_runner: ModelRunner, **kwargs):
        super().__init__(model_runner, **kwargs)
        self._decode_fn = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            backend="cute-dsl",
        )

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
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._decode_fn(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=lens,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class PartialCuteDslLocalBackend(ForkCuteDslMLABackend):
    def __init__(self, model_runner: ModelRunner, **kwargs):
        super().__init__(model_runner, **kwargs)
        self._decode_fn = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            backend="cute-dsl",
        )

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
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        raw_out, lse = self._decode_fn(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class ClosureDecodeBackend(ForkTRTLLMMLABackend):
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
        dcp = get_parallel().dcp_enabled

        def _decode(lens: torch.Tensor):
            return self._launch(
                query,
                kv_cache,
                metadata.block_kv_indices,
                lens,
                metadata.max_seq_len_k,
                layer,
                return_lse=dcp,
            )

        bs = forward_batch.batch_size
        # Padded graph rows carry seq_len 0; the kernel wants >= 1.
        lens = clamp_kv_lens(forward_batch.seq_lens[:bs], self.max_context_len)
        if dcp:
            raw_out, lse = _decode(lens)
            return self._finish_rank_local(raw_out, lse, lens, layer, bs)
        return _decode(lens).view(-1, layer.tp_q_head_num * layer.v_head_dim)


class ClosureLocalDecodeBackend(ForkTRTLLMMLABackend):
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
        dcp = get_parallel().dcp_enabled

        def _decode(lens: torch.Tensor):
            return self._launch(
                query,
                kv_cache,
                metadata.block_kv_indices,
                lens,
                metadata.max_seq_len_k,
                layer,
                return_lse=dcp,
            )

        bs = forward_batch.batch_size
        lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        if dcp:
            raw_out, lse = _decode(lens)
            return self._finish_rank_local(raw_out, lse, lens, layer, bs)
        return _decode(lens).view(-1, layer.tp_q_head_num * layer.v_head_dim)


class CachedLensDecodeBackend(ForkTRTLLMMLABackend):
    def __init__(self, model_runner: ModelRunner, **kwargs):
        super().__init__(model_runner, **kwargs)
        self.step_lens = StepLensCache()

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self.step_lens.update(forward_batch.seq_lens)

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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = self.step_lens.seq_lens[:bs]
        raw_out, lse = self._launch(
            query, kv_cache, metadata.block_kv_indices, seq_lens,
            metadata.max_seq_len_k, layer, return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)


class CachedLocalLensDecodeBackend(ForkTRTLLMMLABackend):
    def __init__(self, model_runner: ModelRunner, **kwargs):
        super().__init__(model_runner, **kwargs)
        self.step_lens = StepLensCache()

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self.step_lens.update(
                self._get_dcp_local_seq_lens(forward_batch.seq_lens),
                causal_seqs=forward_batch.seq_lens,
            )

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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = self.step_lens.seq_lens[:bs]
        raw_out, lse = self._launch(
            query, kv_cache, metadata.block_kv_indices, seq_lens,
            metadata.max_seq_len_k, layer, return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)


class ServerArgsDcpBackend(ForkTRTLLMMLABackend):
    def __init__(self, model_runner: ModelRunner, **kwargs):
        super().__init__(model_runner, **kwargs)
        self.dcp_size = model_runner.server_args.dcp_size

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
        seq_lens = forward_batch.seq_lens[:bs]
        if self.dcp_size > 1:
            raw_out, lse = self._launch(
                query, kv_cache, metadata.block_kv_indices, seq_lens,
                metadata.max_seq_len_k, layer, return_lse=True,
            )
            return self._finish_rank_local(raw_out, lse, seq_lens.to(torch.int32), layer, bs)
        raw_out = self._launch(
            query, kv_cache, metadata.block_kv_indices, seq_lens,
            metadata.max_seq_len_k, layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class ServerArgsRefusingBackend(ForkTRTLLMMLABackend):
    def __init__(self, model_runner: ModelRunner, **kwargs):
        super().__init__(model_runner, **kwargs)
        self.dcp_size = model_runner.server_args.dcp_size

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
        if self.dcp_size > 1:
            raise NotImplementedError(
                f"{type(self).__name__} decodes whole-sequence page tables; "
                f"use cutedsl_mla with --dcp-size {self.dcp_size}"
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        raw_out = self._launch(
            query, kv_cache, metadata.block_kv_indices,
            forward_batch.seq_lens[: forward_batch.batch_size],
            metadata.max_seq_len_k, layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class HostLensDecodeBackend(ForkTRTLLMMLABackend):
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
        if get_dcp_world_size() <= 1:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        # Read the host mirror to avoid a device-side int64->int32 cast per layer.
        seq_lens = forward_batch.seq_lens_cpu[:bs].to(torch.int32).to(
            query.device, non_blocking=True
        )
        raw_out, lse = self._launch(
            query, kv_cache, metadata.block_kv_indices, seq_lens,
            self._get_dcp_local_max_seq_len(metadata.max_seq_len_k), layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)


class InlineShareDecodeBackend(ForkTRTLLMMLABackend):
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
        world = get_dcp_world_size()
        if world <= 1:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        rank = get_dcp_rank()
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        lens = forward_batch.seq_lens[:bs]
        # Token t lives on rank t % world: this rank owns len // world tokens,
        # plus one of the remainder when rank < len % world.
        local_lens = (lens // world + (rank < lens % world).to(lens.dtype)).to(
            torch.int32
        )
        raw_out, lse = self._launch(
            query, kv_cache, metadata.block_kv_indices, local_lens,
            metadata.max_seq_len_k, layer, return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_lens, layer, bs)


class GraphAwareDecodeBackend(ForkTRTLLMMLABackend):
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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        graph_metadata = self.decode_cuda_graph_metadata.get(bs)
        if graph_metadata is not None and self.forward_decode_metadata is graph_metadata:
            # Captured path: the static global buffer is refreshed by replay
            # prep and is what the captured kernel must read.
            metadata = graph_metadata
            seq_lens = graph_metadata.global_seq_lens_k
        else:
            metadata = self._current_decode_metadata(forward_batch)
            seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._launch(
            query, kv_cache, metadata.block_kv_indices, seq_lens,
            metadata.max_seq_len_k, layer, return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)


class GraphAwareLocalDecodeBackend(ForkTRTLLMMLABackend):
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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        graph_metadata = self.decode_cuda_graph_metadata.get(bs)
        if graph_metadata is not None and self.forward_decode_metadata is graph_metadata:
            # Captured path: _apply_dcp_cuda_graph_metadata refreshes the
            # rank-local static buffer on every replay.
            metadata = graph_metadata
            seq_lens = graph_metadata.seq_lens_k
        else:
            metadata = self._current_decode_metadata(forward_batch)
            seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._launch(
            query, kv_cache, metadata.block_kv_indices, seq_lens,
            metadata.max_seq_len_k, layer, return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)
