"""CUDA-graph capture/replay variants of the TRTLLM MLA decode under DCP.

Per-batch-size metadata lives in ``self._graph_meta[bs]`` (and a rank-local
twin); decode/verify implementations are chosen by name at startup.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Dict, Set

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg30.prod import mla_kernels as mk

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.model_runner import ModelRunner


class GraphCachedTrtllmMLABackend(mk.MLAQueryMixin, TRTLLMMLABackend):
    CHUNK = 64

    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._graph_meta: Dict[int, SimpleNamespace] = {}
        self._graph_meta_local: Dict[int, SimpleNamespace] = {}
        self._captured_bs: Set[int] = set()
        self.decode_impl = os.environ.get("STARTUP_GRAPH_DECODE", "graph_local")
        self.verify_impl = os.environ.get("STARTUP_GRAPH_VERIFY", "bounded")
        self._decode_table = {
            "graph": self.forward_decode_graph,
            "graph_local": self.forward_decode_graph_local,
            "fallback": self.forward_decode_eager_fallback,
            "chunked": self.forward_decode_chunked,
            "chunked_local": self.forward_decode_chunked_local,
            "prop": self.forward_decode_prop,
            "prop_local": self.forward_decode_prop_local,
        }
        self._verify_table = {
            "local_only": self.forward_verify_local_only,
            "bounded": self.forward_verify_bounded,
        }

    # ------------------------------------------------------------ capture
    # idiom: layers/attention/trtllm_mla_backend.py _init_cuda_graph_metadata; allocates the per-bs buffers in two dicts, no launch
    # expect: clean
    def capture_decode_meta(self, bs: int) -> None:
        max_blocks = self._calc_padded_blocks(self.max_context_len)
        for store in (self._graph_meta, self._graph_meta_local):
            store[bs] = SimpleNamespace(
                seq_lens_k=torch.zeros((bs,), dtype=torch.int32, device=self.device),
                global_seq_lens_k=torch.zeros((bs,), dtype=torch.int32, device=self.device),
                block_kv_indices=torch.full(
                    (bs, max_blocks), -1, dtype=torch.int32, device=self.device
                ),
                max_seq_len_k=self._get_dcp_local_max_seq_len(self.max_context_len),
            )

    def replay_decode_meta(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        meta = self._graph_meta[bs]
        seq_lens = forward_batch.seq_lens[:bs]
        meta.seq_lens_k.copy_(seq_lens)
        meta.global_seq_lens_k.copy_(seq_lens)
        self._fill_dcp_block_kv_indices(
            meta.block_kv_indices,
            forward_batch.req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(seq_lens),
        )

    def replay_decode_meta_local(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        meta = self._graph_meta_local[bs]
        seq_lens = forward_batch.seq_lens[:bs]
        meta.global_seq_lens_k.copy_(seq_lens)
        meta.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
        self._fill_dcp_block_kv_indices(
            meta.block_kv_indices,
            forward_batch.req_pool_indices[:bs],
            meta.seq_lens_k,
        )

    def _refresh_graph_meta(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.batch_size not in self._graph_meta:
            self.capture_decode_meta(forward_batch.batch_size)
        self.replay_decode_meta(forward_batch)
        self.replay_decode_meta_local(forward_batch)

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if get_parallel().dcp_enabled and forward_batch.forward_mode.is_decode_or_idle():
            self._refresh_graph_meta(forward_batch)

    def init_forward_metadata_out_graph(self, forward_batch: ForwardBatch, in_capture: bool = False):
        super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        if not (get_parallel().dcp_enabled and forward_batch.forward_mode.is_decode_or_idle()):
            return
        if in_capture:
            self.capture_decode_meta(forward_batch.batch_size)
            self._captured_bs.add(forward_batch.batch_size)
        self._refresh_graph_meta(forward_batch)

    @property
    def local_kv_lens(self) -> torch.Tensor:
        return self.forward_decode_metadata.global_seq_lens_k

    @property
    def rank_kv_lens(self) -> torch.Tensor:
        return self.forward_decode_metadata.seq_lens_k

    # ----------------------------------------------------------- dispatch
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        if not get_parallel().dcp_enabled or cos_sin_cache is not None:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache,
                                          q_rope, k_rope, cos_sin_cache, is_neox,
                                          llama_4_scaling)
        return self._decode_table[self.decode_impl](
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        if (
            forward_batch.forward_mode.is_target_verify()
            and get_parallel().dcp_enabled
            and cos_sin_cache is None
            and q_rope is not None
        ):
            return self._verify_table[self.verify_impl](
                q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
            )
        return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache,
                                      q_rope, k_rope, cos_sin_cache, is_neox,
                                      llama_4_scaling)

    # ------------------------------------------------------------- decode
    # idiom: layers/attention/trtllm_mla_backend.py decode_cuda_graph_metadata[bs] replay; reads self._graph_meta[bs].seq_lens_k, which replay_decode_meta filled with global lens
    # expect: SG203
    def forward_decode_graph(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._graph_meta[forward_batch.batch_size]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=meta.seq_lens_k,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, meta.seq_lens_k, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _apply_dcp_cuda_graph_metadata replay; reads self._graph_meta_local[bs].seq_lens_k (rank-local)
    # expect: clean
    def forward_decode_graph_local(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._graph_meta_local[forward_batch.batch_size]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=meta.seq_lens_k,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, meta.seq_lens_k, layer)

    # idiom: layers/attention/trtllm_mla_backend.py forward_decode graph/eager split; graph arm rank-local, eager fallback for uncaptured bs uses forward_batch.seq_lens
    # expect: SG203
    def forward_decode_eager_fallback(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        bs = forward_batch.batch_size
        if bs in self._captured_bs:
            graph_meta = self._graph_meta_local[bs]
            block_tables = graph_meta.block_kv_indices
            seq_lens = graph_meta.seq_lens_k
            max_seq_len = graph_meta.max_seq_len_k
        else:
            meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
            block_tables = meta.block_kv_indices
            seq_lens = forward_batch.seq_lens[:bs]
            max_seq_len = meta.max_seq_len_k
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, seq_lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp split into CHUNK-sized launches; each chunk gets a slice of forward_batch.seq_lens
    # expect: SG203
    def forward_decode_chunked(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        kv_cache = self._kv_cache(layer)
        outs, lses = [], []
        for start in range(0, bs, self.CHUNK):
            end = min(start + self.CHUNK, bs)
            raw_out, lse = self._run_decode_kernel(
                query=query[start:end],
                kv_cache=kv_cache,
                block_tables=meta.block_kv_indices[start:end],
                seq_lens=seq_lens[start:end],
                max_seq_len=meta.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            outs.append(raw_out)
            lses.append(lse)
        return self._finish_dcp(torch.cat(outs), torch.cat(lses), seq_lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp split into CHUNK-sized launches; slices of _get_dcp_local_seq_lens
    # expect: clean
    def forward_decode_chunked_local(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        local_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        kv_cache = self._kv_cache(layer)
        outs, lses = [], []
        for start in range(0, bs, self.CHUNK):
            end = min(start + self.CHUNK, bs)
            raw_out, lse = self._run_decode_kernel(
                query=query[start:end],
                kv_cache=kv_cache,
                block_tables=meta.block_kv_indices[start:end],
                seq_lens=local_lens[start:end],
                max_seq_len=meta.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            outs.append(raw_out)
            lses.append(lse)
        return self._finish_dcp(torch.cat(outs), torch.cat(lses), local_lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; lens read through the local_kv_lens property, which returns global_seq_lens_k
    # expect: SG203
    def forward_decode_prop(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self.forward_decode_metadata
        bs = forward_batch.batch_size
        lens = self.local_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; lens read through the rank_kv_lens property (metadata.seq_lens_k, rank-local)
    # expect: clean
    def forward_decode_prop_local(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self.forward_decode_metadata
        bs = forward_batch.batch_size
        lens = self.rank_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, lens, layer)

    # ------------------------------------------------------------- verify
    # idiom: layers/attention/trtllm_mla_backend.py forward_extend DCP target-verify arm; branches on dcp_enabled for rank-local lens, launches [bs, ndt] query with no causal bound
    # expect: SG203
    def forward_verify_local_only(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        ndt = forward_batch.spec_info.draft_token_num
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, tokens_per_req=ndt)
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        if get_parallel().dcp_enabled:
            lens = meta.seq_lens_k
        else:
            lens = meta.global_seq_lens_k
        raw_out, lse = mk.launch_trtllm_mla(
            self,
            query,
            self._kv_cache(layer),
            meta.block_kv_indices,
            lens,
            meta.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, lens, layer, tokens_per_req=ndt)

    # idiom: layers/attention/cutedsl_mla_backend.py _run_decode_kernel via the cute-dsl DCP launcher; rank-local lens + causal_seqs=global_seq_lens_k
    # expect: clean
    def forward_verify_bounded(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        ndt = forward_batch.spec_info.draft_token_num
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, tokens_per_req=ndt)
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        raw_out, lse = mk.launch_cute_dsl_dcp(
            self,
            query,
            self._kv_cache(layer),
            meta.block_kv_indices,
            meta.seq_lens_k,
            meta.max_seq_len_k,
            layer,
            causal_seqs=meta.global_seq_lens_k,
        )
        return self._finish_dcp(raw_out, lse, meta.seq_lens_k, layer, tokens_per_req=ndt)
