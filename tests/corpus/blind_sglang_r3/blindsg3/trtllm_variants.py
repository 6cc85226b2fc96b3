"""TRTLLM-MLA decode variants used by the fork's DCP deployments.

All classes keep the upstream metadata path (``init_forward_metadata`` from
:class:`TRTLLMMLABackend`) and only change how the decode kernel is driven.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg3.dcp_utils import (
    batch_kv_lens,
    decode_kernel_lens,
    rank_local_lens,
)

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class _DecodeQueryMixin:
    """bf16 query/KV preparation shared by the variants below."""

    def _prepare_decode_query(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
    ):
        if save_kv_cache:
            assert k is not None and k_rope is not None
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope_reshaped = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = concat_mla_absorb_q_general(q_nope, q_rope_reshaped)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return query, kv_cache

    def _current_metadata(self, forward_batch: "ForwardBatch"):
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        batch_size = getattr(metadata, "batch_size", None)
        if batch_size is not None and batch_size < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata

    def _finish_dcp(self, raw_out, lse, local_seq_lens, layer, bs):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse


# ---------------------------------------------------------------------------
# _forward_decode_dcp variants
# ---------------------------------------------------------------------------


class BoundedTRTLLMMLABackend(_DecodeQueryMixin, TRTLLMMLABackend):
    """Reads the per-step lengths from the metadata's global buffer so the
    CUDA-graph path and the eager path use one source of truth."""

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
        seq_lens = metadata.global_seq_lens_k
        if seq_lens is None:
            seq_lens = forward_batch.seq_lens
        seq_lens = seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, seq_lens, layer, bs)


class HoistedTRTLLMMLABackend(_DecodeQueryMixin, TRTLLMMLABackend):
    """Same as upstream but derives the rank-local lengths from the global
    buffer when the hoisted local view has not been filled in yet."""

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
        if metadata.seq_lens_k is not None:
            seq_lens = metadata.seq_lens_k[:bs]
        else:
            seq_lens = metadata.global_seq_lens_k
            if seq_lens is None:
                seq_lens = forward_batch.seq_lens
            seq_lens = self._get_dcp_local_seq_lens(seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, seq_lens, layer, bs)


# ---------------------------------------------------------------------------
# lengths cached on self by init_forward_metadata
# ---------------------------------------------------------------------------


class StepCacheTRTLLMMLABackend(_DecodeQueryMixin, TRTLLMMLABackend):
    """Caches the step's KV lengths once in init_forward_metadata and reads
    them from every MLA layer."""

    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._step_kv_lens = forward_batch.seq_lens.to(torch.int32)
            self._step_local_kv_lens = self._get_dcp_local_seq_lens(
                self._step_kv_lens
            )
        else:
            self._step_kv_lens = None
            self._step_local_kv_lens = None

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
        if self.data_type == torch.float8_e4m3fn or cos_sin_cache is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_metadata(forward_batch)
        bs = forward_batch.batch_size
        dcp = get_parallel().dcp_enabled
        out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._step_kv_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = out
            return self._finish_dcp(raw_out, lse, self._step_local_kv_lens[:bs], layer, bs)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class StepCacheLocalTRTLLMMLABackend(StepCacheTRTLLMMLABackend):
    """StepCache variant that hands the kernel the rank-local cache."""

    # expect: clean
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
        if self.data_type == torch.float8_e4m3fn or cos_sin_cache is not None:
            return TRTLLMMLABackend.forward_decode(
                self, q, k, v, layer, forward_batch, save_kv_cache, q_rope,
                k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_metadata(forward_batch)
        bs = forward_batch.batch_size
        dcp = get_parallel().dcp_enabled
        kv_lens = self._step_local_kv_lens[:bs]
        out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = out
            return self._finish_dcp(raw_out, lse, kv_lens, layer, bs)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


# ---------------------------------------------------------------------------
# functools.partial launchers
# ---------------------------------------------------------------------------


class PartialLaunchTRTLLMMLABackend(_DecodeQueryMixin, TRTLLMMLABackend):
    """Binds the per-step kernel arguments once, then launches per layer."""

    def _bind_decode(self, kv_cache, metadata, layer, seq_lens):
        return functools.partial(
            self._run_decode_kernel,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
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
        kv_lens = batch_kv_lens(forward_batch, bs)
        launch = self._bind_decode(kv_cache, metadata, layer, kv_lens)
        raw_out, lse = launch(query=query)
        return self._finish_dcp(
            raw_out, lse, self._get_dcp_local_seq_lens(kv_lens), layer, bs
        )


class PartialLaunchLocalTRTLLMMLABackend(PartialLaunchTRTLLMMLABackend):
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
        kv_lens = rank_local_lens(batch_kv_lens(forward_batch, bs))
        launch = functools.partial(
            self._run_decode_kernel,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        raw_out, lse = launch(query=query, return_lse=True)
        return self._finish_dcp(raw_out, lse, kv_lens, layer, bs)


# ---------------------------------------------------------------------------
# _run_decode_kernel guards
# ---------------------------------------------------------------------------


class VerifyOnGenTRTLLMMLABackend(TRTLLMMLABackend):
    """Lets DCP target-verify run on trtllm-gen: the causal bound is only
    refused when a caller explicitly asks for it."""

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
        if get_parallel().dcp_enabled and causal_seqs is not None:
            raise NotImplementedError(
                "trtllm-gen cannot take a global causal bound; use cutedsl_mla"
            )
        bmm1_scale = self._compute_decode_bmm1_scale(layer)
        if seq_lens.dtype != torch.int32:
            seq_lens = seq_lens.to(torch.int32)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=bmm1_scale,
            return_lse=return_lse,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        )


class StrictGenTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm-gen launch with the upstream multi-token DCP refusal."""

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
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and (q_len > 1 or causal_seqs is not None):
            raise NotImplementedError(
                "trtllm-gen cannot take a global causal bound; use cutedsl_mla"
            )
        bmm1_scale = self._compute_decode_bmm1_scale(layer)
        if seq_lens.dtype != torch.int32:
            seq_lens = seq_lens.to(torch.int32)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=bmm1_scale,
            return_lse=return_lse,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        )


# ---------------------------------------------------------------------------
# eager fallback when the metadata lacks lengths
# ---------------------------------------------------------------------------


class EagerFallbackTRTLLMMLABackend(_DecodeQueryMixin, TRTLLMMLABackend):
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
        parallel = get_parallel()
        if parallel.dcp_enabled and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_metadata(forward_batch)
        bs = forward_batch.batch_size

        seq_lens = metadata.seq_lens_k
        if seq_lens is None:
            # Metadata built by an older planner: rebuild lengths from the batch.
            seq_lens = batch_kv_lens(forward_batch, bs)

        if not parallel.dcp_enabled:
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
            seq_lens=seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, seq_lens[:bs], layer, bs)


class EagerFallbackLocalTRTLLMMLABackend(EagerFallbackTRTLLMMLABackend):
    # expect: clean
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
        parallel = get_parallel()
        if parallel.dcp_enabled and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_metadata(forward_batch)
        bs = forward_batch.batch_size

        seq_lens = metadata.seq_lens_k
        if seq_lens is None:
            # Metadata built by an older planner: rebuild lengths from the batch
            # (already rank-local when DCP is on).
            seq_lens = decode_kernel_lens(forward_batch, bs)

        if not parallel.dcp_enabled:
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
            seq_lens=seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, seq_lens[:bs], layer, bs)


# ---------------------------------------------------------------------------
# kwargs-dict launchers calling FlashInfer directly
# ---------------------------------------------------------------------------


class KwargsLaunchTRTLLMMLABackend(_DecodeQueryMixin, TRTLLMMLABackend):
    def _base_kernel_kwargs(self, query, kv_cache, metadata, layer):
        return {
            "query": query,
            "kv_cache": kv_cache,
            "workspace_buffer": self.workspace_buffer,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "block_tables": metadata.block_kv_indices,
            "max_seq_len": metadata.max_seq_len_k,
            "bmm1_scale": self._compute_decode_bmm1_scale(layer),
            "multi_ctas_kv_counter_buffer": self._multi_ctas_kv_counter_buffer,
        }

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
        kwargs = self._base_kernel_kwargs(query, kv_cache, metadata, layer)
        if metadata.global_seq_lens_k is not None:
            kwargs["seq_lens"] = metadata.global_seq_lens_k[:bs]
        else:
            kwargs["seq_lens"] = forward_batch.seq_lens[:bs].to(torch.int32)
        kwargs["return_lse"] = True
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)
        local = self._get_dcp_local_seq_lens(kwargs["seq_lens"])
        return self._finish_dcp(raw_out, lse, local, layer, bs)


class KwargsLaunchLocalTRTLLMMLABackend(KwargsLaunchTRTLLMMLABackend):
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
        parallel = get_parallel()
        kwargs = self._base_kernel_kwargs(query, kv_cache, metadata, layer)
        if metadata.global_seq_lens_k is not None:
            global_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kwargs.update(
            seq_lens=get_dcp_lens(
                global_lens, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32),
            return_lse=True,
        )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)
        return self._finish_dcp(raw_out, lse, kwargs["seq_lens"], layer, bs)
