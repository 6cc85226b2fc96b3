"""trtllm_mla backend variants used on our DCP decode deployments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg7.attn._query import prepare_mla_query_and_cache

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.model_runner import ModelRunner


def _dcp_output(backend, raw_out, lse, local_seq_lens, layer, bs):
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(
        output, lse, local_seq_lens, backend.q_indptr_decode[: bs + 1], 1
    )
    return output.flatten(1), lse


def _decode_metadata(backend, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
    return (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )


class BatchLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Reads decode lengths from the live batch so a replayed graph's padded
    rows never leak stale metadata into the kernel."""

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
    ) -> torch.Tensor:
        if cos_sin_cache is not None or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = prepare_mla_query_and_cache(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        if get_parallel().dcp_enabled:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return _dcp_output(self, raw_out, lse, seq_lens, layer, bs)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class BatchLensLocalTRTLLMMLABackend(TRTLLMMLABackend):
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
    ) -> torch.Tensor:
        if cos_sin_cache is not None or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = prepare_mla_query_and_cache(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        if get_parallel().dcp_enabled:
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=local_seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return _dcp_output(self, raw_out, lse, local_seq_lens, layer, bs)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class WidenedTableTRTLLMMLABackend(TRTLLMMLABackend):
    """Rebuilds the decode lengths after the parent's plan so the int32 copy
    matches the widened page table we hand to the kernel."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        metadata = self.forward_decode_metadata
        if metadata is None or not get_parallel().dcp_enabled:
            return
        metadata.global_seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        metadata.seq_lens_k = metadata.global_seq_lens_k
        forward_batch.decode_trtllm_mla_metadata = metadata


class WidenedTableLocalTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        metadata = self.forward_decode_metadata
        if metadata is None or not get_parallel().dcp_enabled:
            return
        metadata.global_seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        metadata.seq_lens_k = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
        forward_batch.decode_trtllm_mla_metadata = metadata


class DecodeReplayTRTLLMMLABackend(TRTLLMMLABackend):
    """Single-kernel decode replay refresh (skips the verify / extend arms)."""

    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        seq_lens = seq_lens[:bs]
        local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        metadata.global_seq_lens_k.copy_(seq_lens)
        metadata.seq_lens_k.copy_(seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )


class DecodeReplayLocalTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        seq_lens = seq_lens[:bs]
        local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        metadata.global_seq_lens_k.copy_(seq_lens)
        metadata.seq_lens_k.copy_(local_seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )


class DirectLaunchTRTLLMMLABackend(TRTLLMMLABackend):
    """Calls flashinfer directly on the DCP decode path (no subclass hook)."""

    def _common_launch_kwargs(self, query, kv_cache, metadata, layer):
        return dict(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
            return_lse=True,
        )

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        assert get_parallel().dcp_enabled
        bs = forward_batch.batch_size
        launch_kwargs = self._common_launch_kwargs(query, kv_cache, metadata, layer)
        if metadata.global_seq_lens_k is not None:
            launch_kwargs["seq_lens"] = metadata.global_seq_lens_k[:bs]
        else:
            launch_kwargs["seq_lens"] = metadata.seq_lens_k[:bs]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            **launch_kwargs
        )
        return _dcp_output(self, raw_out, lse, launch_kwargs["seq_lens"], layer, bs)

    # expect: clean
    def _forward_decode_dcp_local(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        assert get_parallel().dcp_enabled
        bs = forward_batch.batch_size
        launch_kwargs = self._common_launch_kwargs(query, kv_cache, metadata, layer)
        if metadata.seq_lens_k is not None:
            launch_kwargs["seq_lens"] = metadata.seq_lens_k[:bs]
        else:
            launch_kwargs["seq_lens"] = self._get_dcp_local_seq_lens(
                forward_batch.seq_lens[:bs]
            )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            **launch_kwargs
        )
        return _dcp_output(self, raw_out, lse, launch_kwargs["seq_lens"], layer, bs)


class PageAwareTRTLLMMLABackend(TRTLLMMLABackend):
    def __init__(
        self,
        model_runner: ModelRunner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
        backend: str = "trtllm-gen",
    ):
        super().__init__(
            model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf, backend
        )
        parallel = get_parallel()
        self.localize_decode_lens = parallel.dcp_enabled and self.page_size == 1

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
    ) -> torch.Tensor:
        query, kv_cache = prepare_mla_query_and_cache(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        if self.localize_decode_lens:
            seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        if not get_parallel().dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _dcp_output(self, raw_out, lse, seq_lens, layer, bs)


class DCPAwareTRTLLMMLABackend(PageAwareTRTLLMMLABackend):
    def __init__(
        self,
        model_runner: ModelRunner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
        backend: str = "trtllm-gen",
    ):
        super().__init__(
            model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf, backend
        )
        self.localize_decode_lens = get_parallel().dcp_enabled

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
    ) -> torch.Tensor:
        query, kv_cache = prepare_mla_query_and_cache(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        if self.localize_decode_lens:
            seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        if not get_parallel().dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _dcp_output(self, raw_out, lse, seq_lens, layer, bs)


class CachedLensTRTLLMMLABackend(TRTLLMMLABackend):
    @property
    def decode_kv_lens(self) -> torch.Tensor:
        metadata = self.forward_decode_metadata
        if metadata.global_seq_lens_k is not None:
            return metadata.global_seq_lens_k
        return metadata.seq_lens_k

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        kv_lens = self.decode_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )
        return _dcp_output(self, raw_out, lse, kv_lens, layer, bs)


class CachedLocalLensTRTLLMMLABackend(TRTLLMMLABackend):
    @property
    def decode_kv_lens(self) -> torch.Tensor:
        metadata = self.forward_decode_metadata
        if metadata.seq_lens_k is not None:
            return metadata.seq_lens_k
        return self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)

    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        kv_lens = self.decode_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )
        return _dcp_output(self, raw_out, lse, kv_lens, layer, bs)
