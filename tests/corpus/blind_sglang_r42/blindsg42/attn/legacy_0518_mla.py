"""MLA backend overrides the fork carried from its SGLang 0.5.18 pin.

In 0.5.18 the trtllm_mla decode hook refused only ``cp_world > 1`` or
``return_lse`` calls, and ``CuteDslMLABackend.init_forward_metadata`` derived
the rank-local lengths itself on top of a parent that still stored global
lengths in ``seq_lens_k``. Some of the fork's classes keep those bodies on
top of the 0.5.23 parents; others were rebased.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


def _trtllm_gen_decode(backend: TRTLLMMLABackend, query, kv_cache, block_tables, seq_lens, max_seq_len, layer):
    bmm1_scale = backend._compute_decode_bmm1_scale(layer)
    seq_lens_i32 = seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32)
    extra_kwargs = {"backend": backend.backend} if backend.backend != "trtllm-gen" else {}
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens_i32,
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        **extra_kwargs,
    )


class Trtllm0518HookMLABackend(TRTLLMMLABackend):
    """trtllm_mla decode hook as pinned from 0.5.18."""

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
    ) -> torch.Tensor:
        """Hook for subclasses to swap the decode/spec-verify kernel.

        The DCP arguments belong to the hook contract because forward_extend
        passes them on the DCP target-verify path. This implementation does not
        forward them to the kernel and returns no LSE, so only the DCP-capable
        subclasses serve them."""
        if cp_world > 1 or return_lse:
            raise NotImplementedError(
                "trtllm_mla does not forward the cyclic DCP metadata to its "
                "decode kernel and returns no rank-local LSE for the cross-rank "
                "merge; select cutedsl_mla for a DCP target-verify run"
            )
        return _trtllm_gen_decode(
            self, query, kv_cache, block_tables, seq_lens, max_seq_len, layer
        )


class Trtllm0518KernelMLABackend(TRTLLMMLABackend):
    """Same pinned kernel call, with the guard rebased onto 0.5.23's."""

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
    ) -> torch.Tensor:
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and (
            q_len > 1 or causal_seqs is not None or not return_lse
        ):
            raise NotImplementedError(
                "trtllm_mla cannot forward a global causal bound to its decode "
                "kernel, which is required for DCP with q_len > 1; select "
                "cutedsl_mla for a DCP speculative run"
            )
        if return_lse:
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
        return _trtllm_gen_decode(
            self, query, kv_cache, block_tables, seq_lens, max_seq_len, layer
        )


class CuteDsl0518HookMLABackend(CuteDslMLABackend):
    """cute-dsl metadata hook as pinned from 0.5.18."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        mode = forward_batch.forward_mode
        metadata = self.forward_decode_metadata
        if not get_parallel().dcp_enabled or metadata is None:
            return
        if not (
            mode.is_decode_or_idle()
            or mode.is_target_verify()
            or mode.is_draft_extend_v2()
        ):
            return
        # 0.5.18 hoist: the parent leaves the int32 GLOBAL lengths in
        # seq_lens_k; keep them as global_seq_lens_k and derive this rank's
        # view once per step (forward_decode reads both every MLA layer).
        hoist = mode.is_target_verify() or (
            mode.is_decode_or_idle() and metadata.seq_lens_k is not None
        )
        if hoist:
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k
            )
        metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(
            metadata.max_seq_len_k
        )


class CuteDsl0518CompatMLABackend(CuteDslMLABackend):
    """The 0.5.18 hook kept only for parents that still leave the global
    lengths in ``seq_lens_k`` (no ``global_seq_lens_k`` set)."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        metadata = self.forward_decode_metadata
        if not get_parallel().dcp_enabled or metadata is None:
            return
        if not (
            forward_batch.forward_mode.is_decode_or_idle()
            or forward_batch.forward_mode.is_target_verify()
            or forward_batch.forward_mode.is_draft_extend_v2()
        ):
            return
        if metadata.global_seq_lens_k is None and metadata.seq_lens_k is not None:
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k
            )
            metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(
                metadata.max_seq_len_k
            )
