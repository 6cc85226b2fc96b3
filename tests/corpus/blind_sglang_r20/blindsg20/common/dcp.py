"""Decode-context-parallel (DCP) length helpers used by the fork's MLA backends.

Under DCP every rank holds an interleaved slice of each request's KV cache.
Kernels that walk the page table need this rank's share of each length
("local" lens); the cross-rank causal bound of a multi-token query needs the
whole-sequence lengths ("global" lens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Tuple

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def dcp_local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This rank's share of ``seq_lens`` (identity when DCP is off), int32."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)


def dcp_local_max(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local, 1)


@dataclass
class DcpDecodeLens:
    """Rank-local and whole-sequence KV lengths of one decode step."""

    local: torch.Tensor
    global_: torch.Tensor

    @classmethod
    def from_batch(
        cls,
        forward_batch: "ForwardBatch",
        metadata: Optional["TRTLLMMLADecodeMetadata"] = None,
    ) -> "DcpDecodeLens":
        bs = forward_batch.batch_size
        if (
            metadata is not None
            and metadata.seq_lens_k is not None
            and metadata.global_seq_lens_k is not None
        ):
            return cls(
                local=metadata.seq_lens_k[:bs],
                global_=metadata.global_seq_lens_k[:bs],
            )
        global_ = forward_batch.seq_lens[:bs].to(torch.int32)
        return cls(local=dcp_local_lens(global_), global_=global_)


def decode_kernel_lens(
    metadata: "TRTLLMMLADecodeMetadata", forward_batch: "ForwardBatch"
) -> Tuple[torch.Tensor, int]:
    """(seq_lens, max_seq_len) for a decode launch.

    Reads the hoisted int32 buffer when metadata init populated it, else the
    live batch tensor.
    """
    bs = forward_batch.batch_size
    if metadata.seq_lens_k is not None:
        return metadata.seq_lens_k[:bs], metadata.max_seq_len_k
    return forward_batch.seq_lens[:bs].to(torch.int32), metadata.max_seq_len_k


def decode_kernel_lens_local(
    metadata: "TRTLLMMLADecodeMetadata", forward_batch: "ForwardBatch"
) -> Tuple[torch.Tensor, int]:
    """Like :func:`decode_kernel_lens`, localising the live-batch fallback."""
    bs = forward_batch.batch_size
    if metadata.seq_lens_k is not None:
        return metadata.seq_lens_k[:bs], metadata.max_seq_len_k
    return dcp_local_lens(forward_batch.seq_lens[:bs]), metadata.max_seq_len_k


def host_lens_to_device(seq_lens_cpu: torch.Tensor, device) -> torch.Tensor:
    return seq_lens_cpu.to(device=device, dtype=torch.int32, non_blocking=True)
