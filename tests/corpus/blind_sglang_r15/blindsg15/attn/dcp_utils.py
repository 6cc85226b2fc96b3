"""Decode-context-parallel helpers shared by the fork's MLA backends.

Under DCP every rank holds an interleaved slice of each request's KV; the
kernel wants this rank's share as ``seq_lens`` and (for cute-dsl) the whole
sequence as the causal bound.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


@dataclass
class DcpLens:
    """Rank-local and global KV lengths of one decode step."""

    local: torch.Tensor
    global_: torch.Tensor
    max_local: int


def dcp_local_max(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local, 1)


def dcp_split_lens(global_lens: torch.Tensor, max_seq_len: int) -> DcpLens:
    """Split whole-sequence lengths into this rank's share (identity w/o DCP)."""
    parallel = get_parallel()
    global_i32 = global_lens.to(torch.int32)
    if not parallel.dcp_enabled:
        return DcpLens(global_i32, global_i32, max_seq_len)
    local = get_dcp_lens(global_i32, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )
    return DcpLens(local, global_i32, dcp_local_max(max_seq_len))


@contextlib.contextmanager
def int32_lens(lens: torch.Tensor) -> Iterator[torch.Tensor]:
    """Hand out an int32 view of ``lens`` for the duration of one launch."""
    converted = lens if lens.dtype == torch.int32 else lens.to(torch.int32)
    try:
        yield converted
    finally:
        del converted


def iter_step_lens(
    base_lens: torch.Tensor, num_steps: int
) -> Iterator[Tuple[int, torch.Tensor]]:
    """Per draft step, the lengths after that step's token was written."""
    for step in range(num_steps):
        yield step, (base_lens + step + 1).to(torch.int32)


def iter_step_dcp_lens(
    global_base: torch.Tensor, num_steps: int
) -> Iterator[Tuple[int, DcpLens]]:
    for step in range(num_steps):
        global_lens = (global_base + step + 1).to(torch.int32)
        yield step, dcp_split_lens(global_lens, int(global_lens.max().item()))


def launch_mla_decode(
    backend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    layer,
    *,
    causal_global: Optional[torch.Tensor] = None,
    return_lse: bool = False,
):
    """Thin launcher over flashinfer's MLA decode entry (trtllm-gen or, with a
    causal bound, the DCP-capable cute-dsl kernel)."""
    kwargs = dict(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
    )
    if causal_global is not None:
        parallel = get_parallel()
        kwargs.update(
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=causal_global.to(torch.int32),
            return_lse=True,
        )
    else:
        kwargs["return_lse"] = return_lse
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)


class ForkMLAQueryMixin:
    """Query / KV-cache preparation lifted from the upstream decode path."""

    def _fork_prepare_query(
        self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
    ):
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope_r = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = concat_mla_absorb_q_general(q_nope, q_rope_r)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return query, kv_cache

    def _fork_finish_dcp(self, raw_out, lse, local_lens, layer, bs, q_per_req=1):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_lens, self.q_indptr_decode[: bs + 1], q_per_req
        )
        return output.flatten(1), lse

    def _fork_metadata(self, forward_batch):
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
