"""Metadata records of the DCP MLA backends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sglang.srt.runtime_context import get_parallel


@dataclass
class DcpLaunchArgs:
    """Arguments of the cute-dsl DCP decode entry (enable_dcp=True)."""

    cp_world: int
    cp_rank: int
    causal_seqlens_kv_global: Optional[torch.Tensor] = None

    @classmethod
    def current(cls, causal_seqlens_kv_global: Optional[torch.Tensor] = None) -> Optional["DcpLaunchArgs"]:
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return None
        return cls(
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=causal_seqlens_kv_global,
        )


@dataclass
class DcpDecodeMetadata:
    """Per-step decode metadata kept by our DCP backends.

    ``local_seq_lens`` is this rank's share of each request (what the page
    table lists); ``global_seq_lens`` the whole request (the causal bound).
    """

    block_kv_indices: Optional[torch.Tensor] = None
    local_seq_lens: Optional[torch.Tensor] = None
    global_seq_lens: Optional[torch.Tensor] = None
    max_local_seq_len: int = 1
    batch_size: int = 0
    q_len: int = 1


@dataclass(frozen=True)
class MLAKernelDims:
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int

    @classmethod
    def of(cls, backend) -> "MLAKernelDims":
        return cls(
            kv_lora_rank=backend.kv_lora_rank,
            qk_nope_head_dim=backend.qk_nope_head_dim,
            qk_rope_head_dim=backend.qk_rope_head_dim,
        )
