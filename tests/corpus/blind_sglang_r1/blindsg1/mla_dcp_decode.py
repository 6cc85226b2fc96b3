"""trtllm-gen MLA decode under decode context parallel (DCP).

Each DCP rank holds an interleaved slice of every request's KV; the parent
``TRTLLMMLABackend.init_forward_metadata`` already builds this rank's page
table (``_fill_dcp_block_kv_indices``) and, in 0.5.23, hoists the rank-local
lengths into ``seq_lens_k`` / the global ones into ``global_seq_lens_k``.
These overrides trim the per-layer decode body for our DeepSeek deployment.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg1._dcp_utils import kernel_lens, rank_local_lens

if is_flashinfer_available():
    import flashinfer


class _DecodePrepMixin:
    """bf16 query/KV prep shared by the overrides (no fp8 KV in this fleet)."""

    def _decode_query(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
    ) -> torch.Tensor:
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = concat_mla_absorb_q_general(q_nope, q_rope)
        return query.unsqueeze(1)

    def _kv_cache(self, layer: RadixAttention) -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _merge_ready(self, raw_out, lse, local_seq_lens, layer, bs):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse


class SlimDCPTRTLLMMLABackend(_DecodePrepMixin, TRTLLMMLABackend):
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
        query = self._decode_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        kv_cache = self._kv_cache(layer)
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size

        if get_parallel().dcp_enabled:
            seq_lens = forward_batch.seq_lens[:bs]
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return self._merge_ready(raw_out, lse, seq_lens, layer, bs)

        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class LeanDCPTRTLLMMLABackend(_DecodePrepMixin, TRTLLMMLABackend):
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
        query = self._decode_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        kv_cache = self._kv_cache(layer)
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size

        if get_parallel().dcp_enabled:
            seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return self._merge_ready(raw_out, lse, seq_lens, layer, bs)

        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class MergeLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Keeps upstream forward_decode; only the DCP leg is replaced."""

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
        if metadata.global_seq_lens_k is not None:
            kv_lens = metadata.global_seq_lens_k[:bs]
        else:
            kv_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, kv_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class LSEMergeTRTLLMMLABackend(TRTLLMMLABackend):
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
        if metadata.seq_lens_k is not None:
            kv_lens = metadata.seq_lens_k[:bs]
        else:
            kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, kv_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class HoistedLensTRTLLMMLABackend(_DecodePrepMixin, TRTLLMMLABackend):
    """Hoists the kernel's int32 lengths once per step instead of per layer.

    Registered for the eager-only PD decode pool (--disable-cuda-graph), so
    init_forward_metadata runs before every decode step.
    """

    _kernel_seq_lens: Optional[torch.Tensor] = None

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._kernel_seq_lens = forward_batch.seq_lens.to(torch.int32)

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
        query = self._decode_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        metadata = self._metadata(forward_batch)
        dcp = get_parallel().dcp_enabled
        out = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=self._kernel_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = out
            return self._merge_ready(
                raw_out, lse, self._kernel_seq_lens, layer, forward_batch.batch_size
            )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class StepLensTRTLLMMLABackend(HoistedLensTRTLLMMLABackend):
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        TRTLLMMLABackend.init_forward_metadata(self, forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._kernel_seq_lens = rank_local_lens(
                forward_batch.seq_lens
            ).to(torch.int32)

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
        query = self._decode_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        metadata = self._metadata(forward_batch)
        dcp = get_parallel().dcp_enabled
        out = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=self._kernel_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = out
            return self._merge_ready(
                raw_out, lse, self._kernel_seq_lens, layer, forward_batch.batch_size
            )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


# expect: SG203
def trtllm_mla_decode_dcp(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    """Direct kernel call used by our fused MLA layer (bypasses
    ``_run_decode_kernel`` to pass the multi-CTA counter explicitly)."""
    metadata = (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    kernel_kwargs = dict(
        query=query,
        kv_cache=paged_row_view(k_cache, backend.page_size).unsqueeze(1),
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=metadata.block_kv_indices,
        max_seq_len=metadata.max_seq_len_k,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
    )
    kernel_kwargs["seq_lens"] = forward_batch.seq_lens.to(torch.int32)
    if get_parallel().dcp_enabled:
        kernel_kwargs["return_lse"] = True
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        multi_ctas_kv_counter_buffer=backend._multi_ctas_kv_counter_buffer,
        **kernel_kwargs,
    )


# expect: clean
def fused_mla_decode_dcp(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    metadata = (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    kernel_kwargs = dict(
        query=query,
        kv_cache=paged_row_view(k_cache, backend.page_size).unsqueeze(1),
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=metadata.block_kv_indices,
        max_seq_len=metadata.max_seq_len_k,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
    )
    # seq_lens_k is rank-local under DCP (parent init hoists it).
    kernel_kwargs["seq_lens"] = metadata.seq_lens_k[: forward_batch.batch_size]
    if get_parallel().dcp_enabled:
        kernel_kwargs["return_lse"] = True
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        multi_ctas_kv_counter_buffer=backend._multi_ctas_kv_counter_buffer,
        **kernel_kwargs,
    )


class PartialKernelTRTLLMMLABackend(_DecodePrepMixin, TRTLLMMLABackend):
    """Binds the static kernel arguments once."""

    _decode_fn = None

    def _decode_kernel(self):
        if self._decode_fn is None:
            self._decode_fn = functools.partial(
                flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
                workspace_buffer=self.workspace_buffer,
                qk_nope_head_dim=self.qk_nope_head_dim,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
                return_lse=True,
            )
        return self._decode_fn

    def _rank_block_table(self, forward_batch: ForwardBatch) -> torch.Tensor:
        bs = forward_batch.batch_size
        table = torch.full(
            (bs, self._calc_padded_blocks(self.max_context_len)),
            -1,
            dtype=torch.int32,
            device=forward_batch.seq_lens.device,
        )
        self._fill_dcp_block_kv_indices(
            table,
            forward_batch.req_pool_indices,
            self._get_dcp_local_seq_lens(forward_batch.seq_lens),
        )
        return table

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
        query = self._decode_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        block_tables = self._rank_block_table(forward_batch)
        seq_lens = forward_batch.seq_lens.to(torch.int32)
        raw_out, lse = self._decode_kernel()(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(self.max_context_len),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return self._merge_ready(raw_out, lse, seq_lens, layer, forward_batch.batch_size)


class FallbackLensTRTLLMMLABackend(_DecodePrepMixin, TRTLLMMLABackend):
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
        query = self._decode_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        metadata = self._metadata(forward_batch)
        # Graph replay hoists seq_lens_k; eager batches built by the PD
        # transfer path arrive without it.
        local_seq_lens = kernel_lens(metadata, forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(
            raw_out, lse, local_seq_lens, layer, forward_batch.batch_size
        )


class PDLensTRTLLMMLABackend(_DecodePrepMixin, TRTLLMMLABackend):
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
        query = self._decode_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = rank_local_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, local_seq_lens, layer, bs)


class LastBatchLensTRTLLMMLABackend(_DecodePrepMixin, TRTLLMMLABackend):
    _last_forward_batch: Optional[ForwardBatch] = None

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._last_forward_batch = forward_batch

    @property
    def kv_lens(self) -> torch.Tensor:
        fb = self._last_forward_batch
        return fb.seq_lens[: fb.batch_size].to(torch.int32)

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
        query = self._decode_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        metadata = self._metadata(forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=self.kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(
            raw_out, lse, self.kv_lens, layer, forward_batch.batch_size
        )
