"""Thin wrappers around FlashInfer's trtllm MLA decode kernel.

Used by the fork's model-side DCP decode (the merge lives in the model, so it
calls the kernel directly instead of going through a backend's forward).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def mla_decode_rank_local(
    backend: "TRTLLMMLABackend",
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    layer: "RadixAttention",
):
    """Single-token MLA decode returning ``(out, lse)`` for the DCP merge."""
    if query.dim() == 3:
        query = query.unsqueeze(1)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        return_lse=True,
    )


# expect: SG203
def dcp_decode_from_batch(
    backend: "TRTLLMMLABackend",
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: "ForwardBatch",
):
    parallel = get_parallel()
    metadata = forward_batch.decode_trtllm_mla_metadata
    bs = forward_batch.batch_size
    # seq_lens_cpu is already host-resident; avoids a D2H sync per layer.
    seq_lens = forward_batch.seq_lens_cpu[:bs].to(query.device, non_blocking=True)
    max_len = backend._get_dcp_local_max_seq_len(int(forward_batch.seq_lens_cpu.max()))
    out, lse = mla_decode_rank_local(
        backend, query, kv_cache, metadata.block_kv_indices, seq_lens, max_len, layer
    )
    if parallel.dcp_enabled:
        fixup_zero_kv_rows(
            out,
            lse,
            get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank),
            backend.q_indptr_decode[: bs + 1],
            1,
        )
    return out, lse


# expect: clean
def dcp_decode_from_batch_local(
    backend: "TRTLLMMLABackend",
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: "ForwardBatch",
):
    parallel = get_parallel()
    metadata = forward_batch.decode_trtllm_mla_metadata
    bs = forward_batch.batch_size
    seq_lens = forward_batch.seq_lens_cpu[:bs].to(query.device, non_blocking=True)
    if parallel.dcp_enabled:
        seq_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)
    max_len = backend._get_dcp_local_max_seq_len(int(forward_batch.seq_lens_cpu.max()))
    out, lse = mla_decode_rank_local(
        backend, query, kv_cache, metadata.block_kv_indices, seq_lens, max_len, layer
    )
    if parallel.dcp_enabled:
        fixup_zero_kv_rows(out, lse, seq_lens, backend.q_indptr_decode[: bs + 1], 1)
    return out, lse
