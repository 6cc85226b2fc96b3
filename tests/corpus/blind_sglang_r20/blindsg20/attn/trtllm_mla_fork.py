"""Fork variants of ``TRTLLMMLABackend`` decode under decode context parallel.

Every class here is registered under its own ``--attention-backend`` alias by
``blindsg20.attn`` so deployments can A/B the decode paths.  Only the bf16
decode path is overridden; everything else is upstream.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.nvtx_utils import profile_range

from blindsg20.attn._mla_base import ForkMLAPlumbingMixin
from blindsg20.common.dcp import (
    DcpDecodeLens,
    decode_kernel_lens,
    decode_kernel_lens_local,
    dcp_local_lens,
)

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


class ForkTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """trtllm_mla with the fork's bf16 decode path (no fused set-kv/concat)."""

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
        if (
            not self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
            or get_in_autotune_dummy_run()
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )

        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_cache = self._fork_kv_cache(layer)
        metadata = self._fork_decode_metadata(forward_batch)
        bs = forward_batch.batch_size

        if get_parallel().dcp_enabled:
            # Captured metadata is sized for the graph bucket; take the live
            # batch's lengths so padded bucket rows never reach the kernel.
            seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return self._fork_finish_dcp(raw_out, lse, seq_lens, layer, bs)

        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class LocalLensTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """Same decode path as ForkTRTLLMMLABackend, rank-local lengths under DCP."""

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
        if (
            not self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
            or get_in_autotune_dummy_run()
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )

        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_cache = self._fork_kv_cache(layer)
        metadata = self._fork_decode_metadata(forward_batch)
        bs = forward_batch.batch_size

        if get_parallel().dcp_enabled:
            if metadata.seq_lens_k is not None:
                seq_lens = metadata.seq_lens_k[:bs]
            else:
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
            return self._fork_finish_dcp(raw_out, lse, seq_lens, layer, bs)

        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class NonDcpFastTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """Skips the hoisted int32 buffer on single-rank KV; DCP stays upstream."""

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
        if get_parallel().dcp_enabled or not self._fork_takes_fast_path(
            cos_sin_cache, llama_4_scaling
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._fork_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        # Single-rank KV: the batch lengths are exactly what the table holds.
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=self._fork_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class HoistedLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Reads the int32 lens hoisted by metadata init instead of re-casting."""

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
        # Both metadata init and graph replay keep the hoisted buffers fresh;
        # fall back to the live batch only for hand-built metadata.
        if metadata.global_seq_lens_k is not None:
            kv_lens = metadata.global_seq_lens_k[:bs]
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
        return output.flatten(1), lse


class ProfiledTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """Wraps the DCP decode in an NVTX range for the fork's rank-skew traces."""

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
        parallel = get_parallel()
        with profile_range(f"dcp_decode[r{parallel.dcp_rank}/{parallel.dcp_size}]"):
            if metadata.seq_lens_k is not None:
                local_lens = metadata.seq_lens_k[:bs]
            else:
                local_lens = get_dcp_lens(
                    forward_batch.seq_lens[:bs], parallel.dcp_size, parallel.dcp_rank
                ).to(torch.int32)
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=local_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
        return self._fork_finish_dcp(raw_out, lse, local_lens, layer, bs)


class PinnedLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Keeps the decode int32 lens in one persistent buffer across steps."""

    _pinned_lens: Optional[torch.Tensor] = None

    def _pinned_seq_lens(self, bs: int) -> torch.Tensor:
        if self._pinned_lens is None or self._pinned_lens.shape[0] < bs:
            self._pinned_lens = torch.zeros(
                (max(bs, 256),), dtype=torch.int32, device=self.device
            )
        return self._pinned_lens[:bs]

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        metadata = self.forward_decode_metadata
        if metadata is None:
            return
        bs = forward_batch.batch_size
        buf = self._pinned_seq_lens(bs)
        buf.copy_(forward_batch.seq_lens[:bs])
        # Decode reads seq_lens_k per layer; point it at the persistent buffer
        # so the allocator does not churn a fresh int32 tensor every step.
        metadata.seq_lens_k = buf
        forward_batch.decode_trtllm_mla_metadata = metadata


class PinnedLocalLensTRTLLMMLABackend(TRTLLMMLABackend):
    """PinnedLensTRTLLMMLABackend, keeping the rank-local view under DCP."""

    _pinned_lens: Optional[torch.Tensor] = None

    def _pinned_seq_lens(self, bs: int) -> torch.Tensor:
        if self._pinned_lens is None or self._pinned_lens.shape[0] < bs:
            self._pinned_lens = torch.zeros(
                (max(bs, 256),), dtype=torch.int32, device=self.device
            )
        return self._pinned_lens[:bs]

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        metadata = self.forward_decode_metadata
        if metadata is None:
            return
        bs = forward_batch.batch_size
        buf = self._pinned_seq_lens(bs)
        if get_parallel().dcp_enabled:
            metadata.global_seq_lens_k = forward_batch.seq_lens[:bs].to(torch.int32)
            buf.copy_(self._get_dcp_local_seq_lens(metadata.global_seq_lens_k))
        else:
            buf.copy_(forward_batch.seq_lens[:bs])
        metadata.seq_lens_k = buf
        forward_batch.decode_trtllm_mla_metadata = metadata


class KwargsTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """Builds the decode kernel arguments once, shared with the fork's tracer."""

    def _dcp_kernel_kwargs(self, metadata: TRTLLMMLADecodeMetadata, bs: int) -> dict:
        return {
            "block_tables": metadata.block_kv_indices,
            "seq_lens": metadata.global_seq_lens_k[:bs],
            "max_seq_len": metadata.max_seq_len_k,
        }

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
        kernel_kwargs = self._dcp_kernel_kwargs(metadata, bs)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            layer=layer,
            return_lse=True,
            **kernel_kwargs,
        )
        return self._fork_finish_dcp(
            raw_out, lse, metadata.seq_lens_k[:bs], layer, bs
        )


class KwargsLocalTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """KwargsTRTLLMMLABackend with the rank-local buffer in the kwargs."""

    def _dcp_kernel_kwargs(self, metadata: TRTLLMMLADecodeMetadata, bs: int) -> dict:
        return {
            "block_tables": metadata.block_kv_indices,
            "seq_lens": metadata.seq_lens_k[:bs],
            "max_seq_len": metadata.max_seq_len_k,
        }

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
        kernel_kwargs = self._dcp_kernel_kwargs(metadata, bs)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            layer=layer,
            return_lse=True,
            **kernel_kwargs,
        )
        return self._fork_finish_dcp(raw_out, lse, kernel_kwargs["seq_lens"], layer, bs)


class DataclassLensTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """Carries both DCP length views in one record through the decode."""

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
        lens = DcpDecodeLens(
            metadata.global_seq_lens_k[:bs],
            metadata.seq_lens_k[:bs],
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, lens.local, layer, bs)


class DataclassLensLocalTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """DataclassLensTRTLLMMLABackend built through the record's constructor."""

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
        lens = DcpDecodeLens.from_batch(forward_batch, metadata)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, lens.local, layer, bs)


class FallbackLensTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """Skips the hoisted int32 copy when the batch has no host mirror."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if (
            forward_batch.forward_mode.is_decode_or_idle()
            and getattr(forward_batch, "seq_lens_cpu", None) is None
            and self.forward_decode_metadata is not None
        ):
            # No host mirror means this came from the overlap scheduler's
            # device-only path; the kernel can read the batch tensor directly.
            self.forward_decode_metadata.seq_lens_k = None

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
        seq_lens, max_seq_len = decode_kernel_lens(metadata, forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, seq_lens, layer, bs)


class FallbackLocalLensTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """FallbackLensTRTLLMMLABackend with a rank-local fallback."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if (
            forward_batch.forward_mode.is_decode_or_idle()
            and getattr(forward_batch, "seq_lens_cpu", None) is None
            and self.forward_decode_metadata is not None
        ):
            self.forward_decode_metadata.seq_lens_k = None

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
        seq_lens, max_seq_len = decode_kernel_lens_local(metadata, forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, seq_lens, layer, bs)


class StepCachedTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """Remembers the batch it planned so per-layer code reads one source."""

    _planned_batch: Optional["ForwardBatch"] = None

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._planned_batch = forward_batch

    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        # Captured graphs read the runner's static seq_lens buffer, which the
        # capture batch aliases; replays refresh it in place.
        if in_capture:
            self._planned_batch = forward_batch

    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        fb = self._planned_batch
        return fb.seq_lens[: fb.batch_size].to(torch.int32)

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
        seq_lens = self.kernel_seq_lens
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, seq_lens, layer, bs)


class StepCachedLocalTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """StepCachedTRTLLMMLABackend whose property returns this rank's share."""

    _planned_batch: Optional["ForwardBatch"] = None

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._planned_batch = forward_batch

    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        # Captured graphs read the runner's static seq_lens buffer, which the
        # capture batch aliases; replays refresh it in place.
        if in_capture:
            self._planned_batch = forward_batch

    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        fb = self._planned_batch
        return dcp_local_lens(fb.seq_lens[: fb.batch_size])

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
        seq_lens = self.kernel_seq_lens
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, seq_lens, layer, bs)


class _MetadataLensMixin:
    """Decode lengths straight from the (rank-local under DCP) metadata."""

    def _decode_lens(self, metadata: TRTLLMMLADecodeMetadata, forward_batch):
        return metadata.seq_lens_k[: forward_batch.batch_size]


class _LiveBatchLensMixin(_MetadataLensMixin):
    """Graph replay buffers can be wider than the live batch after DP padding;
    read the live batch tensor instead of the captured buffer."""

    def _decode_lens(self, metadata: TRTLLMMLADecodeMetadata, forward_batch):
        return forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)


class LayeredTRTLLMMLABackend(
    _LiveBatchLensMixin, ForkMLAPlumbingMixin, TRTLLMMLABackend
):
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
        seq_lens = self._decode_lens(metadata, forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, seq_lens, layer, bs)


class LayeredLocalTRTLLMMLABackend(
    _MetadataLensMixin, ForkMLAPlumbingMixin, TRTLLMMLABackend
):
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
        seq_lens = self._decode_lens(metadata, forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, seq_lens, layer, bs)
