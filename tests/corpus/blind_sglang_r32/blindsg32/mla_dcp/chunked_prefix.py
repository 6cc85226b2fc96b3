"""Chunked-prefix MHA path for MLA prefill under DCP.

The fork attends each prefix chunk over this rank's slice of the chunk only
(no KV all-gather) and merges the per-rank results by LSE in the model, so
every chunk wrapper must be planned with this rank's share of each chunk.
The fresh extend tokens (ragged, causal) are not sharded.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, List

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import FlashInferMhaChunkKVRunner
from sglang.srt.layers.dcp.layout import filter_dcp_local_chunk_kv_indices
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg32.mla_dcp.dcp_math import DcpShard, cu_lens, local_chunk_lens

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class _RankLocalChunkMixin:
    """Shared plumbing: per-chunk local KV indices read from this rank's pool."""

    chunk_local_kv_indices: List[torch.Tensor]

    def _collect_local_chunk_indices(self, forward_batch: ForwardBatch) -> None:
        self.chunk_local_kv_indices = []
        for idx in range(forward_batch.num_prefix_chunks):
            self.chunk_local_kv_indices.append(
                filter_dcp_local_chunk_kv_indices(
                    forward_batch.prefix_chunk_kv_indices[idx],
                    forward_batch.prefix_chunk_starts_cpu[idx],
                    forward_batch.prefix_chunk_seq_lens_cpu[idx],
                )
            )

    def _plan_ragged(self, forward_batch: ForwardBatch, qo_indptr: torch.Tensor, bs: int) -> None:
        kv_indptr = qo_indptr if not forward_batch.mha_one_shot else self.kv_indptr[: bs + 1]
        self.ragged_wrapper.begin_forward(
            qo_indptr=qo_indptr,
            kv_indptr=kv_indptr,
            num_qo_heads=self.num_local_heads,
            num_kv_heads=self.num_local_heads,
            head_dim_qk=self.qk_nope_head_dim + self.qk_rope_head_dim,
            head_dim_vo=self.v_head_dim,
            q_data_type=self.q_data_type,
            causal=True,
        )


class ForkMhaChunkKVRunner(_RankLocalChunkMixin, FlashInferMhaChunkKVRunner):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMhaChunkKVRunner.update_wrapper; chunk KV indices are this rank's (filter_dcp_local_chunk_kv_indices) but each chunk wrapper is planned with the whole prefix_chunk_cu_seq_lens
    # expect: SG203
    def update_wrapper(self, forward_batch: ForwardBatch, disable_flashinfer_ragged: bool = False):
        num_prefix_chunks = forward_batch.num_prefix_chunks
        self.update_prefix_chunks(num_prefix_chunks)
        self._collect_local_chunk_indices(forward_batch)

        seq_lens = forward_batch.seq_lens
        bs = len(seq_lens)
        qo_indptr = self.qo_indptr
        qo_indptr[1 : bs + 1] = torch.cumsum(seq_lens - forward_batch.extend_prefix_lens, dim=0)
        qo_indptr = qo_indptr[: bs + 1]

        for chunk_idx in range(num_prefix_chunks):
            kv_indptr = forward_batch.prefix_chunk_cu_seq_lens[chunk_idx]
            self.chunk_ragged_wrappers[chunk_idx].begin_forward(
                qo_indptr=qo_indptr,
                kv_indptr=kv_indptr,
                num_qo_heads=self.num_local_heads,
                num_kv_heads=self.num_local_heads,
                head_dim_qk=self.qk_nope_head_dim + self.qk_rope_head_dim,
                head_dim_vo=self.v_head_dim,
                q_data_type=self.q_data_type,
                causal=False,
            )
        if not disable_flashinfer_ragged:
            self._plan_ragged(forward_batch, qo_indptr, bs)


class LocalMhaChunkKVRunner(_RankLocalChunkMixin, FlashInferMhaChunkKVRunner):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMhaChunkKVRunner.update_wrapper; each chunk wrapper planned with cu of get_dcp_lens(chunk_lens, start=chunk_starts), this rank's share
    # expect: clean
    def update_wrapper(self, forward_batch: ForwardBatch, disable_flashinfer_ragged: bool = False):
        num_prefix_chunks = forward_batch.num_prefix_chunks
        self.update_prefix_chunks(num_prefix_chunks)
        self._collect_local_chunk_indices(forward_batch)
        shard = DcpShard.current()

        seq_lens = forward_batch.seq_lens
        bs = len(seq_lens)
        qo_indptr = self.qo_indptr
        qo_indptr[1 : bs + 1] = torch.cumsum(seq_lens - forward_batch.extend_prefix_lens, dim=0)
        qo_indptr = qo_indptr[: bs + 1]

        for chunk_idx in range(num_prefix_chunks):
            chunk_lens = local_chunk_lens(
                forward_batch.prefix_chunk_starts[chunk_idx],
                forward_batch.prefix_chunk_seq_lens[chunk_idx],
                shard,
            )
            self.chunk_ragged_wrappers[chunk_idx].begin_forward(
                qo_indptr=qo_indptr,
                kv_indptr=cu_lens(chunk_lens),
                num_qo_heads=self.num_local_heads,
                num_kv_heads=self.num_local_heads,
                head_dim_qk=self.qk_nope_head_dim + self.qk_rope_head_dim,
                head_dim_vo=self.v_head_dim,
                q_data_type=self.q_data_type,
                causal=False,
            )
        if not disable_flashinfer_ragged:
            self._plan_ragged(forward_batch, qo_indptr, bs)
