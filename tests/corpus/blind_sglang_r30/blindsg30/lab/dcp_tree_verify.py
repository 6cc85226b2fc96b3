"""Lab probe: score a draft tree against the target's MLA cache, with DCP."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Tuple

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg30.prod import mla_kernels as mk
from blindsg30.utils import dcp_lens as dl

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention


def iter_request_chunks(bs: int, chunk: int) -> Iterator[Tuple[int, int]]:
    for start in range(0, bs, chunk):
        yield start, min(start + chunk, bs)


class TreeVerifyDcpProbe:
    def __init__(self, backend: CuteDslMLABackend, draft_token_num: int, chunk: int = 32):
        self.backend = backend
        self.draft_token_num = draft_token_num
        self.chunk = chunk

    def _query_and_cache(self, q: torch.Tensor, layer: "RadixAttention", bs: int):
        query = q.view(bs, self.draft_token_num, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = k_cache.view(-1, self.backend.page_size, 1, k_cache.shape[-1])
        return query, kv_cache

    # idiom: layers/attention/trtllm_mla_backend.py forward_extend target-verify arm; per-chunk generator loop, rank-local lens when dcp_enabled, no global causal bound
    # expect: SG203
    def verify_tree(self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        ndt = self.draft_token_num
        query, kv_cache = self._query_and_cache(q, layer, bs)
        meta = forward_batch.decode_trtllm_mla_metadata
        glob = dl.verify_global_lens(forward_batch.seq_lens[:bs], ndt)
        lens = dl.local_lens(glob) if get_parallel().dcp_enabled else glob
        outs = []
        for start, end in iter_request_chunks(bs, self.chunk):
            raw_out, _lse = mk.launch_trtllm_mla(
                self.backend,
                query[start:end],
                kv_cache,
                meta.block_kv_indices[start:end],
                lens[start:end],
                meta.max_seq_len_k,
                layer,
                return_lse=True,
                kernel="cute-dsl",
            )
            outs.append(raw_out)
        return torch.cat(outs)

    # idiom: layers/attention/trtllm_mla_backend.py _run_decode_kernel refusal; the probe refuses a multi-token tree under DCP
    # expect: clean
    def verify_tree_guarded(self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "tree verify probe: a multi-token tree under DCP needs a global causal bound"
            )
        bs = forward_batch.batch_size
        query, kv_cache = self._query_and_cache(q, layer, bs)
        meta = forward_batch.decode_trtllm_mla_metadata
        glob = dl.verify_global_lens(forward_batch.seq_lens[:bs], self.draft_token_num)
        outs = []
        for start, end in iter_request_chunks(bs, self.chunk):
            outs.append(
                mk.launch_trtllm_mla(
                    self.backend,
                    query[start:end],
                    kv_cache,
                    meta.block_kv_indices[start:end],
                    glob[start:end],
                    meta.max_seq_len_k,
                    layer,
                    kernel="cute-dsl",
                )
            )
        return torch.cat(outs)
