"""CUDA-graph capture/replay buffers for the DCP MLA ports.

Captured graphs bake in tensor addresses, so every per-step length is written
into a capture-stable buffer (``copy_`` / ``torch.add(out=...)`` / slicing)
and the launch reads the buffer.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Dict

import torch

from sglang.srt.distributed.parallel_state import get_dcp_group_no_assert
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

from blindsg35.kernels.cutedsl_mla_dcp import CloudCuteDslMLABackend
from blindsg35.kernels.dcp_view import DcpView

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

logger = logging.getLogger(__name__)


class CloudGraphCuteDslMLABackend(CloudCuteDslMLABackend):
    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py (0.5.18) CuteDslMLABackend._apply_cuda_graph_metadata
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: "ForwardMode",
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
            local_seq_lens = metadata.seq_lens_k
        elif forward_mode.is_draft_extend_v2():
            num_tokens_per_req = self.num_draft_tokens
            metadata.max_seq_len_q = num_tokens_per_req
            metadata.sum_seq_lens_q = num_tokens_per_req * bs
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(seq_lens)
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        else:
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
            local_seq_lens = metadata.seq_lens_k
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )


class CloudGraphCuteDslMTPBackend(CloudGraphCuteDslMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: "ForwardMode",
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
        else:
            if forward_mode.is_draft_extend_v2():
                metadata.max_seq_len_q = self.num_draft_tokens
                metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
        metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(metadata.global_seq_lens_k))
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


class DcpVerifyTierBuffers:
    """Ragged-verify graphs share one slot count per batch size but keep one
    metadata set per token tier; each tier's graph replays its own buffers
    through ``CloudCuteDslMLABackend._multi_token_dcp``."""

    def __init__(self, backend: CloudCuteDslMLABackend):
        self.backend = backend
        self.tiers: Dict[int, Dict[int, TRTLLMMLADecodeMetadata]] = defaultdict(dict)

    def capture_tier(self, bs: int, tier_tokens: int, device: torch.device) -> TRTLLMMLADecodeMetadata:
        metadata = TRTLLMMLADecodeMetadata()
        metadata.seq_lens_k = torch.zeros((bs,), dtype=torch.int32, device=device)
        metadata.global_seq_lens_k = torch.zeros((bs,), dtype=torch.int32, device=device)
        max_blocks = self.backend._calc_padded_blocks(self.backend.max_context_len)
        metadata.block_kv_indices = self.backend.decode_cuda_graph_kv_indices[:bs, :max_blocks]
        metadata.max_seq_len_k = self.backend._get_dcp_local_max_seq_len(
            self.backend.max_context_len + tier_tokens
        )
        self.tiers[bs][tier_tokens] = metadata
        return metadata

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (target verify)
    # expect: clean
    def refresh_tiers(
        self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor
    ) -> None:
        if not get_parallel().dcp_enabled:
            raise RuntimeError("DcpVerifyTierBuffers is only built under DCP")
        for tier_tokens, metadata in self.tiers[bs].items():
            torch.add(seq_lens[:bs], tier_tokens, out=metadata.global_seq_lens_k)
            metadata.seq_lens_k.copy_(
                self.backend._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
            self.backend._fill_dcp_block_kv_indices(
                metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
            )


class LeanDcpVerifyTierBuffers(DcpVerifyTierBuffers):
    """Refresh variant that skips the per-tier int32 conversion kernel."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (target verify)
    # expect: SG203
    def refresh_tiers(
        self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor
    ) -> None:
        if not get_parallel().dcp_enabled:
            raise RuntimeError("DcpVerifyTierBuffers is only built under DCP")
        parallel = get_parallel()
        for tier_tokens, metadata in self.tiers[bs].items():
            torch.add(seq_lens[:bs], tier_tokens, out=metadata.global_seq_lens_k)
            # The kernel clips each row with the global bound, so seq_lens_k can
            # share the global values; only the page table needs the slice.
            metadata.seq_lens_k.copy_(metadata.global_seq_lens_k)
            local = get_dcp_lens(
                metadata.global_seq_lens_k, parallel.dcp_size, parallel.dcp_rank
            )
            self.backend._fill_dcp_block_kv_indices(
                metadata.block_kv_indices, req_pool_indices[:bs], local
            )


class DcpDecodeLauncher:
    """q_len == 1 cute-dsl decode with one rank-local length buffer per
    captured batch size."""

    def __init__(self, backend: CuteDslMLABackend, view: DcpView):
        self.backend = backend
        self.view = view
        self._local_by_bs: Dict[int, torch.Tensor] = {}

    @classmethod
    def from_process_group(cls, backend: CuteDslMLABackend) -> "DcpDecodeLauncher":
        return cls(backend, DcpView.from_group(get_dcp_group_no_assert()))

    def reserve(self, bs: int, device: torch.device) -> None:
        self._local_by_bs[bs] = torch.zeros((bs,), dtype=torch.int32, device=device)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode
    # expect: SG203
    def launch(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
    ):
        bs = seq_lens.shape[0]
        buf = self._local_by_bs.get(bs)
        if buf is not None:
            buf.copy_(get_dcp_lens(seq_lens, self.view.size, self.view.rank))
            local = buf
        else:
            # Not a captured size: an eager batch, the lengths go through as-is.
            local = seq_lens.to(torch.int32)
        return self.backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=local,
            max_seq_len=max_seq_len,
            layer=layer,
            causal_seqs=seq_lens,
            cp_world=self.view.size,
            cp_rank=self.view.rank,
            return_lse=True,
        )


class PinnedDcpDecodeLauncher(DcpDecodeLauncher):
    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode
    # expect: clean
    def launch(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
    ):
        bs = seq_lens.shape[0]
        buf = self._local_by_bs.get(bs)
        if buf is None:
            # Eager size: allocate once and keep it for the next step.
            buf = torch.empty((bs,), dtype=torch.int32, device=seq_lens.device)
            self._local_by_bs[bs] = buf
        buf.copy_(get_dcp_lens(seq_lens, self.view.size, self.view.rank))
        return self.backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=buf,
            max_seq_len=max_seq_len,
            layer=layer,
            causal_seqs=seq_lens,
            cp_world=self.view.size,
            cp_rank=self.view.rank,
            return_lse=True,
        )
