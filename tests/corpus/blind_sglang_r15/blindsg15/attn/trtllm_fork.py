"""trtllm_mla backends used by the fork's DeepSeek deployments with DCP.

Upstream ``TRTLLMMLABackend.forward_decode`` prepares the query and, under
DCP, hands off to ``_forward_decode_dcp``; the variants below customise that
hook and the metadata the framework launches with.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

logger = logging.getLogger(__name__)


class _ForkTrtllmBase(TRTLLMMLABackend):
    def _finish(self, raw_out, lse, local_seq_lens, layer, bs):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse


class ForkTrtllmMLABatchLensBackend(_ForkTrtllmBase):
    """Reads lengths from the batch: DP padding may grow the batch past the
    planned metadata."""

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
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
        return self._finish(raw_out, lse, seq_lens, layer, bs)


class ForkTrtllmMLABatchLensLocalBackend(_ForkTrtllmBase):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        parallel = get_parallel()
        # Lengths from the (possibly padded) batch, reduced to this rank's
        # interleaved share before they reach the kernel.
        seq_lens = get_dcp_lens(
            forward_batch.seq_lens[:bs], parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, seq_lens, layer, bs)


class ForkTrtllmMLATypoBackend(_ForkTrtllmBase):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if metadata.global_seq_lens_k is not None:
            local_seq_lens = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k[:bs]
            )
        else:
            local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=(
                metadata.global_seq_lens_k[:bs]
                if metadata.global_seq_lens_k is not None
                else local_seq_lens
            ),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local_seq_lens, layer, bs)


class ForkTrtllmMLARebuildLensBackend(_ForkTrtllmBase):
    """Rebuilds the per-step int32 lengths after the parent's planning, to
    pick up the DP-padded rows."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        metadata = self.forward_decode_metadata
        metadata.seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            metadata.global_seq_lens_k = metadata.seq_lens_k
        forward_batch.decode_trtllm_mla_metadata = metadata


class ForkTrtllmMLARebuildLocalLensBackend(_ForkTrtllmBase):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        metadata = self.forward_decode_metadata
        metadata.seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k
            )
        forward_batch.decode_trtllm_mla_metadata = metadata


class ForkTrtllmMLAGraphGlobalBackend(_ForkTrtllmBase):
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
        # Decode: one copy per step into the capture-stable buffers, page
        # table over this rank's slice.
        seq_lens = seq_lens[:bs]
        metadata.global_seq_lens_k.copy_(seq_lens)
        metadata.seq_lens_k.copy_(seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(seq_lens),
        )


class ForkTrtllmMLAGraphLocalBackend(_ForkTrtllmBase):
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
        metadata.global_seq_lens_k.copy_(seq_lens)
        local = self._get_dcp_local_seq_lens(seq_lens)
        metadata.seq_lens_k.copy_(local)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


class ForkTrtllmMLAFallbackBackend(_ForkTrtllmBase):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        try:
            local_seq_lens = metadata.seq_lens_k[:bs]
        except TypeError:
            # Metadata planned by an older path without the int32 buffer.
            local_seq_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local_seq_lens, layer, bs)


class ForkTrtllmMLAEarlyOutBackend(_ForkTrtllmBase):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is None:
            # Hand-built spec batches arrive without hoisted lengths.
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
            return self._finish(raw_out, lse, seq_lens, layer, bs)
        local_seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local_seq_lens, layer, bs)


class ForkTrtllmMLAPropertyBackend(_ForkTrtllmBase):
    @property
    def _decode_kv_lens(self) -> Optional[torch.Tensor]:
        md = self.forward_decode_metadata
        return None if md is None else md.global_seq_lens_k

    @property
    def _decode_local_kv_lens(self) -> Optional[torch.Tensor]:
        md = self.forward_decode_metadata
        return None if md is None else md.seq_lens_k

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        kv_lens = self._decode_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, kv_lens, layer, bs)


class ForkTrtllmMLALocalPropertyBackend(ForkTrtllmMLAPropertyBackend):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        # seq_lens_k was localized once per step by init_forward_metadata /
        # the graph replay prep under DCP.
        kv_lens = self._decode_local_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, kv_lens, layer, bs)


class ForkTrtllmMLAStashedLensBackend(_ForkTrtllmBase):
    """Stashes the step's lengths at plan time so the per-layer launch does
    not touch the metadata object."""

    _fork_kv_lens: Optional[torch.Tensor] = None

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._fork_kv_lens = forward_batch.seq_lens.to(torch.int32)

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        kv_lens = self._fork_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, kv_lens, layer, bs)


class ForkTrtllmMLAStashedLocalLensBackend(_ForkTrtllmBase):
    _fork_kv_lens: Optional[torch.Tensor] = None

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._fork_kv_lens = self._get_dcp_local_seq_lens(
                forward_batch.seq_lens.to(torch.int32)
            )

    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        kv_lens = self._fork_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, kv_lens, layer, bs)


class ForkTrtllmMLABranchBackend(_ForkTrtllmBase):
    """Own decode entry that serves both DCP and non-DCP deployments."""

    # expect: clean
    def fork_decode(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        bs = forward_batch.batch_size
        if not get_parallel().dcp_enabled:
            out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=forward_batch.seq_lens[:bs],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        local = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            # Already the rank-local bound: init_forward_metadata localizes it.
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local, layer, bs)


class ForkTrtllmMLAServerArgsBackend(_ForkTrtllmBase):
    """Takes the DCP layout from server args once at build time."""

    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None,
                 q_indptr_decode_buf=None, backend="trtllm-gen"):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf,
                         q_indptr_decode_buf, backend)
        self._fork_dcp_size = model_runner.server_args.dcp_size
        self._fork_dcp_rank = get_parallel().dcp_rank if self._fork_dcp_size > 1 else 0

    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs]
        if self._fork_dcp_size > 1:
            kv_lens = get_dcp_lens(kv_lens, self._fork_dcp_size, self._fork_dcp_rank)
        kv_lens = kv_lens.to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, kv_lens, layer, bs)
