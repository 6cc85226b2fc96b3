"""Thin wrappers over flashinfer's MLA decode entry for the fork's backends."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.int32 else t.to(torch.int32)


def dcp_launch_kwargs(causal_lens: torch.Tensor) -> dict:
    """The cute-dsl in-kernel DCP arguments for one launch."""
    parallel = get_parallel()
    return {
        "backend": "cute-dsl",
        "enable_dcp": True,
        "cp_world": parallel.dcp_size,
        "cp_rank": parallel.dcp_rank,
        "causal_seqlens_kv_global": _i32(causal_lens),
        "return_lse": True,
    }


def mla_decode(
    backend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    layer,
    *,
    causal_lens: Optional[torch.Tensor] = None,
    return_lse: bool = False,
):
    """One MLA decode launch with ``backend``'s workspace and scales.

    ``seq_lens`` are the lengths the kernel walks through ``block_tables``;
    ``causal_lens`` switches on the in-kernel DCP path.
    """
    extra = (
        dcp_launch_kwargs(causal_lens)
        if causal_lens is not None
        else {"return_lse": return_lse}
    )
    if causal_lens is None and backend.backend != "trtllm-gen":
        extra["backend"] = backend.backend
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=_i32(seq_lens),
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        **extra,
    )
