"""Free-function MLA decode launchers used by the fork's model code.

The fork's DeepSeek attention calls these directly (bypassing the backend's
forward_decode) when it needs the rank-local ``(out, lse)`` pair for its own
cross-rank merge.  ``backend`` is a TRTLLMMLABackend (or subclass) whose
metadata for the current step has been built by init_forward_metadata.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg14.attn.dcp_lens import (
    DcpDecodeLens,
    as_kernel_lens,
    iter_local_row_chunks,
    iter_row_chunks,
    rank_local_lens,
    rank_local_max,
)

if is_flashinfer_available():
    import flashinfer


def _dims(backend: Any) -> dict:
    return dict(
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
    )


def launch_mla_decode(
    backend: Any,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    layer: Any,
    *,
    return_lse: bool = False,
):
    """Plain trtllm-gen MLA decode; ``seq_lens`` must describe ``block_tables``."""
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=as_kernel_lens(seq_lens),
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        return_lse=return_lse,
        **_dims(backend),
    )


def _metadata(backend: Any, forward_batch: ForwardBatch):
    return (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )


# expect: SG203
def decode_rank_local_state(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch,
):
    metadata = _metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    if get_parallel().dcp_enabled:
        return launch_mla_decode(
            backend,
            query,
            kv_cache,
            metadata.block_kv_indices,
            forward_batch.seq_lens[:bs],
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
    return launch_mla_decode(
        backend, query, kv_cache, metadata.block_kv_indices,
        forward_batch.seq_lens[:bs], metadata.max_seq_len_k, layer,
    )


# expect: clean
def decode_rank_local_state_sharded(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch,
):
    metadata = _metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    lens = DcpDecodeLens.from_global(
        forward_batch.seq_lens[:bs], int(forward_batch.seq_lens_cpu.max())
    )
    return launch_mla_decode(
        backend,
        query,
        kv_cache,
        metadata.block_kv_indices,
        lens.local,
        lens.max_local,
        layer,
        return_lse=get_parallel().dcp_enabled,
    )


# expect: SG203
def decode_with_kernel_kwargs(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch,
):
    metadata = _metadata(backend, forward_batch)
    kernel_kwargs = _dims(backend)
    kernel_kwargs.update(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=as_kernel_lens(forward_batch.seq_lens),
        max_seq_len=metadata.max_seq_len_k,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        return_lse=get_parallel().dcp_enabled,
    )
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)


# expect: clean
def decode_with_local_kernel_kwargs(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch,
):
    metadata = _metadata(backend, forward_batch)
    kernel_kwargs = _dims(backend)
    kernel_kwargs.update(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=rank_local_lens(forward_batch.seq_lens),
        max_seq_len=metadata.max_seq_len_k,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        return_lse=get_parallel().dcp_enabled,
    )
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)


# expect: SG203
def decode_bound_launcher(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch,
):
    metadata = _metadata(backend, forward_batch)
    launch = functools.partial(
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        block_tables=metadata.block_kv_indices,
        seq_lens=metadata.global_seq_lens_k,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        **_dims(backend),
    )
    return launch(
        query=query,
        kv_cache=kv_cache,
        max_seq_len=metadata.max_seq_len_k,
        return_lse=True,
    )


# expect: clean
def decode_bound_launcher_dcp(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch,
):
    parallel = get_parallel()
    metadata = _metadata(backend, forward_batch)
    launch = functools.partial(
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        block_tables=metadata.block_kv_indices,
        seq_lens=metadata.seq_lens_k,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        **_dims(backend),
    )
    if not parallel.dcp_enabled:
        return launch(query=query, kv_cache=kv_cache, max_seq_len=metadata.max_seq_len_k)
    return launch(
        query=query,
        kv_cache=kv_cache,
        max_seq_len=metadata.max_seq_len_k,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        causal_seqlens_kv_global=metadata.global_seq_lens_k,
        return_lse=True,
    )


# expect: SG203
def decode_in_row_chunks(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch, chunk: int = 256,
):
    """Split very large decode batches to bound the split-KV workspace."""
    metadata = _metadata(backend, forward_batch)
    outs, lses = [], []
    for start, end, lens in iter_row_chunks(forward_batch.seq_lens, chunk):
        out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query[start:end],
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices[start:end],
            seq_lens=as_kernel_lens(lens),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=backend._compute_decode_bmm1_scale(layer),
            return_lse=True,
            **_dims(backend),
        )
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


# expect: clean
def decode_in_local_row_chunks(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch, chunk: int = 256,
):
    metadata = _metadata(backend, forward_batch)
    outs, lses = [], []
    for start, end, lens in iter_local_row_chunks(forward_batch.seq_lens, chunk):
        out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query[start:end],
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices[start:end],
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=backend._compute_decode_bmm1_scale(layer),
            return_lse=True,
            **_dims(backend),
        )
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


# expect: clean
def decode_via_local_closure(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch,
):
    metadata = _metadata(backend, forward_batch)
    bmm1_scale = backend._compute_decode_bmm1_scale(layer)

    def _run(lens: torch.Tensor, max_len: int):
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=max_len,
            bmm1_scale=bmm1_scale,
            return_lse=True,
            **_dims(backend),
        )

    max_global = int(forward_batch.seq_lens_cpu.max())
    return _run(rank_local_lens(forward_batch.seq_lens), rank_local_max(max_global))


# expect: SG203
def verify_rank_local(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch,
):
    """Target verify over this rank's share (query is [bs, ndt, H, D])."""
    metadata = _metadata(backend, forward_batch)
    if not get_parallel().dcp_enabled:
        return launch_mla_decode(
            backend, query, kv_cache, metadata.block_kv_indices,
            metadata.seq_lens_k, metadata.max_seq_len_k, layer,
        )
    max_global = int(forward_batch.seq_lens_cpu.max()) + query.shape[1]
    lens = DcpDecodeLens.from_global(metadata.global_seq_lens_k, max_global)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=lens.local,
        max_seq_len=lens.max_local,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        return_lse=True,
        **_dims(backend),
    )


# expect: clean
def verify_rank_local_bounded(
    backend: Any, query: torch.Tensor, kv_cache: torch.Tensor, layer: Any,
    forward_batch: ForwardBatch,
):
    parallel = get_parallel()
    metadata = _metadata(backend, forward_batch)
    if not parallel.dcp_enabled:
        return launch_mla_decode(
            backend, query, kv_cache, metadata.block_kv_indices,
            metadata.seq_lens_k, metadata.max_seq_len_k, layer,
        )
    max_global = int(forward_batch.seq_lens_cpu.max()) + query.shape[1]
    lens = DcpDecodeLens.from_global(metadata.global_seq_lens_k, max_global)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=lens.local,
        max_seq_len=lens.max_local,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        causal_seqlens_kv_global=lens.causal_global,
        return_lse=True,
        **_dims(backend),
    )
