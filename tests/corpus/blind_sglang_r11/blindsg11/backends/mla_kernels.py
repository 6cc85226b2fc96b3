"""Free-function MLA decode paths shared by the DeepSeek forward hooks.

``forward_mla.py`` in our fork calls these directly for the absorbed decode
(skipping RadixAttention) when ``--enable-absorbed-decode-hook`` is set.
"""

from __future__ import annotations

import functools

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.runtime_context import get_parallel

from blindsg11.util.dcp_launch import int32, mla_decode_launcher


def _finish(backend, out, layer, lens, bs, dcp: bool):
    if not dcp:
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
    raw_out, lse = out
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, lens, backend.q_indptr_decode[: bs + 1], 1)
    return output.flatten(1), lse


# expect: SG203
def dcp_decode_with_launcher(backend, query, kv_cache, metadata, layer, forward_batch):
    dcp = get_parallel().dcp_enabled
    launch = mla_decode_launcher(backend, layer)
    if dcp:
        # The cross-rank merge needs every rank's LSE.
        launch = functools.partial(launch, return_lse=True)
    bs = forward_batch.batch_size
    kv_lens = int32(forward_batch.seq_lens[:bs])
    out = launch(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=kv_lens,
        max_seq_len=metadata.max_seq_len_k,
    )
    return _finish(backend, out, layer, kv_lens, bs, dcp)


# expect: clean
def dcp_decode_with_launcher_local(backend, query, kv_cache, metadata, layer, forward_batch):
    dcp = get_parallel().dcp_enabled
    launch = mla_decode_launcher(backend, layer)
    bs = forward_batch.batch_size
    if dcp:
        launch = functools.partial(launch, return_lse=True)
        # seq_lens_k is this rank's share under DCP (metadata init localizes it).
        kv_lens = int32(metadata.seq_lens_k[:bs])
    else:
        kv_lens = int32(forward_batch.seq_lens[:bs])
    out = launch(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=kv_lens,
        max_seq_len=metadata.max_seq_len_k,
    )
    return _finish(backend, out, layer, kv_lens, bs, dcp)


# expect: SG203
def decode_with_kwargs(backend, query, kv_cache, metadata, layer, forward_batch):
    bs = forward_batch.batch_size
    dcp = get_parallel().dcp_enabled
    kernel_kwargs = dict(
        block_tables=metadata.block_kv_indices,
        seq_lens=forward_batch.seq_lens[:bs],
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
    )
    if dcp:
        kernel_kwargs["return_lse"] = True
        if metadata.seq_lens_k is not None and metadata.seq_lens_k.shape[0] == bs:
            kernel_kwargs["seq_lens"] = metadata.seq_lens_k
    out = backend._run_decode_kernel(query=query, kv_cache=kv_cache, **kernel_kwargs)
    return _finish(backend, out, layer, kernel_kwargs["seq_lens"], bs, dcp)


# expect: clean
def decode_with_kwargs_local(backend, query, kv_cache, metadata, layer, forward_batch):
    bs = forward_batch.batch_size
    dcp = get_parallel().dcp_enabled
    kernel_kwargs = dict(
        block_tables=metadata.block_kv_indices,
        seq_lens=forward_batch.seq_lens[:bs],
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
    )
    if dcp:
        kernel_kwargs["return_lse"] = True
        if metadata.seq_lens_k is not None and metadata.seq_lens_k.shape[0] == bs:
            kernel_kwargs["seq_lens"] = metadata.seq_lens_k
        else:
            # Padded graph metadata: derive this rank's share from the batch.
            kernel_kwargs["seq_lens"] = backend._get_dcp_local_seq_lens(
                forward_batch.seq_lens[:bs]
            )
    out = backend._run_decode_kernel(query=query, kv_cache=kv_cache, **kernel_kwargs)
    return _finish(backend, out, layer, kernel_kwargs["seq_lens"], bs, dcp)
