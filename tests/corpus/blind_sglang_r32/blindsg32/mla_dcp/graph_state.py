"""CUDA-graph capture / replay state for the forked trtllm_mla family.

Capture allocates per-bs static buffers; replay refreshes them in place
(the captured kernels read ``seq_lens_k`` as this rank's KV lengths and
``global_seq_lens_k`` as the causal bound).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode

from blindsg32.mla_dcp.builders import ForkDecodeMeta
from blindsg32.mla_dcp.dcp_math import DcpShard

logger = logging.getLogger(__name__)


@dataclass
class GraphBuffers:
    seq_lens_k: torch.Tensor
    global_seq_lens_k: torch.Tensor
    block_kv_indices: torch.Tensor
    max_seq_len_k: int


class MLAGraphState:
    def __init__(self, backend: Any, num_draft_tokens: int, shard: Optional[DcpShard] = None):
        self.backend = backend
        self.num_draft_tokens = num_draft_tokens
        self.shard = shard or DcpShard.current()
        self.buffers: Dict[int, GraphBuffers] = {}

    @classmethod
    def for_backend(cls, backend: Any) -> "MLAGraphState":
        return cls(backend, backend.num_draft_tokens or 0)

    def capture(self, bs: int, forward_mode: ForwardMode, device: torch.device) -> ForkDecodeMeta:
        max_blocks = self.backend._calc_padded_blocks(self.backend.max_context_len)
        extra = self.num_draft_tokens if forward_mode.is_target_verify() else 0
        buf = GraphBuffers(
            seq_lens_k=torch.zeros((bs,), dtype=torch.int32, device=device),
            global_seq_lens_k=torch.zeros((bs,), dtype=torch.int32, device=device),
            block_kv_indices=self.backend.decode_cuda_graph_kv_indices[:bs, :max_blocks],
            max_seq_len_k=self.shard.local_max(self.backend.max_context_len + extra),
        )
        self.buffers[bs] = buf
        return ForkDecodeMeta(
            block_kv_indices=buf.block_kv_indices,
            seq_lens_k=buf.seq_lens_k,
            global_seq_lens_k=buf.global_seq_lens_k,
            max_seq_len_k=buf.max_seq_len_k,
            batch_size=bs,
        )

    def _refill_page_table(self, buf: GraphBuffers, req_pool_indices: torch.Tensor, local_lens: torch.Tensor, bs: int) -> None:
        self.backend._fill_dcp_block_kv_indices(
            buf.block_kv_indices, req_pool_indices[:bs], local_lens
        )

    # idiom: layers/attention/trtllm_mla_backend.py _apply_dcp_cuda_graph_metadata decode branch; replay copies seq_lens into both static buffers, page table rebuilt from local lengths but seq_lens_k stays whole
    # expect: SG203
    def replay_decode(self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor) -> None:
        buf = self.buffers[bs]
        buf.global_seq_lens_k.copy_(seq_lens[:bs])
        buf.seq_lens_k.copy_(seq_lens[:bs])
        if self.shard.enabled:
            self._refill_page_table(
                buf, req_pool_indices, self.shard.localize(seq_lens[:bs]), bs
            )

    # idiom: layers/attention/trtllm_mla_backend.py _apply_dcp_cuda_graph_metadata decode branch; replay writes the global lengths and their rank-local share into the static buffers
    # expect: clean
    def replay_decode_local(self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor) -> None:
        buf = self.buffers[bs]
        buf.global_seq_lens_k.copy_(seq_lens[:bs])
        buf.seq_lens_k.copy_(self.shard.localize(buf.global_seq_lens_k))
        if self.shard.enabled:
            self._refill_page_table(buf, req_pool_indices, buf.seq_lens_k, bs)

    # idiom: layers/attention/trtllm_mla_backend.py _apply_dcp_cuda_graph_metadata target-verify branch; global = seq_lens + draft tokens, then seq_lens_k.copy_(global) without localizing
    # expect: SG203
    def replay_target_verify(self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor) -> None:
        buf = self.buffers[bs]
        torch.add(seq_lens[:bs], self.num_draft_tokens, out=buf.global_seq_lens_k)
        buf.seq_lens_k.copy_(buf.global_seq_lens_k)
        if self.shard.enabled:
            self._refill_page_table(
                buf, req_pool_indices, self.shard.localize(buf.global_seq_lens_k), bs
            )

    # idiom: layers/attention/trtllm_mla_backend.py _apply_dcp_cuda_graph_metadata target-verify branch; global = seq_lens + draft tokens, seq_lens_k = its rank-local share
    # expect: clean
    def replay_target_verify_local(self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor) -> None:
        buf = self.buffers[bs]
        torch.add(seq_lens[:bs], self.num_draft_tokens, out=buf.global_seq_lens_k)
        buf.seq_lens_k.copy_(self.shard.localize(buf.global_seq_lens_k))
        if self.shard.enabled:
            self._refill_page_table(buf, req_pool_indices, buf.seq_lens_k, bs)
