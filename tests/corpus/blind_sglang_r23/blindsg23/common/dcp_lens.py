"""Length plumbing shared by the fork's MLA decode paths.

Nothing here decides whether DCP is on for a given call site; the helpers just
do what their names say. ``launch_trtllm_mla`` is the one place the fork calls
the FlashInfer MLA decode entry directly (trtllm-gen, no in-kernel DCP).
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg23.common.config import DcpTopology

if is_flashinfer_available():
    import flashinfer


def lens_as_i32(forward_batch: ForwardBatch, bs: Optional[int] = None) -> torch.Tensor:
    """The batch's KV lengths as the int32 tensor the kernels take."""
    bs = forward_batch.batch_size if bs is None else bs
    seq_lens = forward_batch.seq_lens[:bs]
    if seq_lens.dtype == torch.int32:
        return seq_lens.clone()
    return seq_lens.to(torch.int32)


def local_kv_lens(global_lens: torch.Tensor, topo: DcpTopology) -> torch.Tensor:
    """This rank's share of each request's KV (token-interleaved layout)."""
    if not topo.enabled:
        return global_lens
    return get_dcp_lens(global_lens, topo.size, topo.rank).to(torch.int32)


def rank_local_lens(fn: Callable) -> Callable:
    """Decorator for launch helpers: localize the ``seq_lens`` keyword under DCP."""

    @functools.wraps(fn)
    def wrapped(self, *args, seq_lens: torch.Tensor, **kwargs):
        parallel = get_parallel()
        if parallel.dcp_enabled:
            seq_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)
        return fn(self, *args, seq_lens=seq_lens.to(torch.int32), **kwargs)

    return wrapped


def launch_trtllm_mla(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    layer,
    *,
    return_lse: bool = False,
):
    """Plain trtllm-gen MLA decode launch with the backend's workspace/scales."""
    if seq_lens.dtype != torch.int32:
        seq_lens = seq_lens.to(torch.int32)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        return_lse=return_lse,
    )
