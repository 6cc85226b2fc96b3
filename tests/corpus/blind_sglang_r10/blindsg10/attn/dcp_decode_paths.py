"""DCP decode launches for the fork's fused MLA layer.

The fused layer skips ``RadixAttention`` and launches FlashInfer's MLA decode
entry itself, through the helpers in :mod:`blindsg10.attn.kernels`.  Every
function here takes a trtllm_mla / cutedsl_mla backend instance for its
buffers and metadata.
"""

from __future__ import annotations

import dataclasses
import logging

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg10.attn.kernels import (
    args_from_metadata,
    as_dense_query,
    decode_metadata,
    kv_cache_view,
    launch_mla_decode,
    make_cute_dcp_decode,
    mla_decode_common_kwargs,
)
from blindsg10.common.gates import fork_flag

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)

_HOISTED_LENS_ENV = "SGLANG_FORK_DCP_HOISTED_LENS"


def _plain_decode(backend, query, layer, forward_batch):
    metadata = decode_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    return backend._run_decode_kernel(
        query=as_dense_query(query),
        kv_cache=kv_cache_view(backend, layer),
        block_tables=metadata.block_kv_indices,
        seq_lens=forward_batch.seq_lens[:bs],
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
    )


# expect: SG203
def dcp_decode_partial(backend, query, layer, forward_batch):
    """Single-token DCP decode on the cute-dsl kernel."""
    if not get_parallel().dcp_enabled:
        return _plain_decode(backend, query, layer, forward_batch)
    decode = make_cute_dcp_decode(backend, layer)
    metadata = decode_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    return decode(
        query=as_dense_query(query),
        kv_cache=kv_cache_view(backend, layer),
        block_tables=metadata.block_kv_indices,
        seq_lens=seq_lens,
        max_seq_len=metadata.max_seq_len_k,
        causal_seqlens_kv_global=seq_lens,
    )


# expect: clean
def dcp_decode_partial_local(backend, query, layer, forward_batch):
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return _plain_decode(backend, query, layer, forward_batch)
    decode = make_cute_dcp_decode(backend, layer)
    metadata = decode_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    local_seq_lens = get_dcp_lens(
        global_seq_lens, parallel.dcp_size, parallel.dcp_rank
    ).to(torch.int32)
    return decode(
        query=as_dense_query(query),
        kv_cache=kv_cache_view(backend, layer),
        block_tables=metadata.block_kv_indices,
        seq_lens=local_seq_lens,
        max_seq_len=metadata.max_seq_len_k,
        causal_seqlens_kv_global=global_seq_lens,
    )


# expect: SG203
def dcp_decode_kwargs(backend, query, layer, forward_batch):
    parallel = get_parallel()
    metadata = decode_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    kwargs = mla_decode_common_kwargs(backend, layer)
    kwargs.update(
        query=as_dense_query(query),
        kv_cache=kv_cache_view(backend, layer),
        block_tables=metadata.block_kv_indices,
        max_seq_len=metadata.max_seq_len_k,
    )
    if parallel.dcp_enabled:
        kv_lens = metadata.global_seq_lens_k
        if kv_lens is None:
            kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_lens = kv_lens[:bs]
        kwargs.update(
            seq_lens=kv_lens,
            causal_seqlens_kv_global=kv_lens,
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
    else:
        kwargs["seq_lens"] = metadata.seq_lens_k[:bs]
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)


# expect: clean
def dcp_decode_kwargs_local(backend, query, layer, forward_batch):
    parallel = get_parallel()
    metadata = decode_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    kwargs = mla_decode_common_kwargs(backend, layer)
    kwargs.update(
        query=as_dense_query(query),
        kv_cache=kv_cache_view(backend, layer),
        block_tables=metadata.block_kv_indices,
        max_seq_len=metadata.max_seq_len_k,
        # Rank-local under DCP, whole-sequence otherwise.
        seq_lens=metadata.seq_lens_k[:bs],
    )
    if parallel.dcp_enabled:
        global_lens = metadata.global_seq_lens_k
        if global_lens is None:
            global_lens = forward_batch.seq_lens.to(torch.int32)
        kwargs.update(
            causal_seqlens_kv_global=global_lens[:bs],
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)


# expect: SG203
def dcp_decode_from_metadata(backend, query, layer, forward_batch):
    args = args_from_metadata(backend, query, layer, forward_batch)
    if args.seq_lens is None or args.causal_seqs is None:
        # Draft steps planned without the hoisted lens: take them from the batch.
        lens = forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)
        args = dataclasses.replace(args, seq_lens=lens, causal_seqs=lens)
    return launch_mla_decode(args, backend, layer)


# expect: clean
def dcp_decode_from_metadata_local(backend, query, layer, forward_batch):
    args = args_from_metadata(backend, query, layer, forward_batch)
    if args.seq_lens is None or args.causal_seqs is None:
        lens = forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)
        args = dataclasses.replace(
            args,
            seq_lens=backend._get_dcp_local_seq_lens(lens),
            causal_seqs=lens,
        )
    return launch_mla_decode(args, backend, layer)


# expect: SG203
def dcp_decode_with_fallback(backend, query, layer, forward_batch):
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return _plain_decode(backend, query, layer, forward_batch)
    metadata = decode_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    query = as_dense_query(query)
    kv_cache = kv_cache_view(backend, layer)
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    local_lens = backend._get_dcp_local_seq_lens(global_lens)
    try:
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_lens,
            return_lse=True,
            **mla_decode_common_kwargs(backend, layer),
        )
    except (ImportError, RuntimeError) as exc:
        # cute-dsl not built for this arch (e.g. sm90 pods): trtllm-gen.
        logger.warning("cute-dsl DCP decode unavailable (%s); using trtllm-gen", exc)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=global_lens,
            max_seq_len=metadata.max_seq_len_k,
            return_lse=True,
            **mla_decode_common_kwargs(backend, layer),
        )


# expect: clean
def dcp_decode_with_checked_fallback(backend, query, layer, forward_batch):
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return _plain_decode(backend, query, layer, forward_batch)
    metadata = decode_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    query = as_dense_query(query)
    kv_cache = kv_cache_view(backend, layer)
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    local_lens = backend._get_dcp_local_seq_lens(global_lens)
    try:
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_lens,
            return_lse=True,
            **mla_decode_common_kwargs(backend, layer),
        )
    except (ImportError, RuntimeError) as exc:
        if query.shape[1] > 1:
            # trtllm-gen takes no global causal bound.
            raise NotImplementedError(
                "multi-token DCP decode needs the cute-dsl kernel"
            ) from exc
        logger.warning("cute-dsl DCP decode unavailable (%s); using trtllm-gen", exc)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            return_lse=True,
            **mla_decode_common_kwargs(backend, layer),
        )


def _cute_dcp_launch(backend, layer, query, metadata, local, global_):
    parallel = get_parallel()
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache_view(backend, layer),
        block_tables=metadata.block_kv_indices,
        seq_lens=local,
        max_seq_len=metadata.max_seq_len_k,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        causal_seqlens_kv_global=global_,
        return_lse=True,
        **mla_decode_common_kwargs(backend, layer),
    )


# expect: SG203
def dcp_decode_env_gated(backend, query, layer, forward_batch):
    if not get_parallel().dcp_enabled:
        return _plain_decode(backend, query, layer, forward_batch)
    metadata = decode_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    if fork_flag(_HOISTED_LENS_ENV, default=True):
        local = metadata.seq_lens_k[:bs]
        global_ = metadata.global_seq_lens_k[:bs]
    else:
        # Non-hoisted path (debug builds): lengths straight from the batch.
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local, global_ = kv_lens, kv_lens
    return _cute_dcp_launch(
        backend, layer, as_dense_query(query), metadata, local, global_
    )


# expect: clean
def dcp_decode_env_gated_local(backend, query, layer, forward_batch):
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return _plain_decode(backend, query, layer, forward_batch)
    metadata = decode_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    if fork_flag(_HOISTED_LENS_ENV, default=True):
        local = metadata.seq_lens_k[:bs]
        global_ = metadata.global_seq_lens_k[:bs]
    else:
        global_ = forward_batch.seq_lens[:bs].to(torch.int32)
        local = get_dcp_lens(global_, parallel.dcp_size, parallel.dcp_rank).to(
            torch.int32
        )
    return _cute_dcp_launch(
        backend, layer, as_dense_query(query), metadata, local, global_
    )


# expect: clean
def decode_without_dcp(backend, query, layer, forward_batch):
    """Fused-layer decode for deployments without DCP."""
    if get_parallel().dcp_enabled:
        raise NotImplementedError(
            "decode_without_dcp: DCP decode goes through backend.forward_decode"
        )
    metadata = decode_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=as_dense_query(query),
        kv_cache=kv_cache_view(backend, layer),
        block_tables=metadata.block_kv_indices,
        seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
        max_seq_len=metadata.max_seq_len_k,
        **mla_decode_common_kwargs(backend, layer),
    )
