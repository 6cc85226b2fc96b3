"""Forked CuteDSL MLA backend: the cute-dsl monolithic decode kernel takes
DCP natively (``enable_dcp`` / ``cp_world`` / ``cp_rank`` /
``causal_seqlens_kv_global``), so multi-token DCP queries run here."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg32.mla_dcp.dcp_math import DcpShard, KvLens

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class ForkCuteDslMLABackend(CuteDslMLABackend):
    def __init__(self, model_runner: "ModelRunner", *args: Any, **kwargs: Any):
        super().__init__(model_runner, *args, **kwargs)
        self.shard = DcpShard.current()

    def _kv_lens_for(self, forward_batch: ForwardBatch) -> torch.Tensor:
        """Per-request KV lengths of the batch (prefill planner / metrics)."""
        return forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)

    def _kv_cache_for(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _metadata_for(self, forward_batch: ForwardBatch):
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode; DCP decode passes rank-local seq_lens and the global lengths as causal_seqs
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled or q_rope is None or cos_sin_cache is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = concat_mla_absorb_q_general(q_nope, q_pe).unsqueeze(1)
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = self._get_dcp_local_seq_lens(global_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # idiom: layers/attention/trtllm_mla_backend.py forward_extend target-verify DCP branch on cute-dsl; (bs, draft_token_num) query with rank-local lengths and causal_seqs = seq_lens + draft tokens
    # expect: clean
    def _forward_verify(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        parallel = get_parallel()
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim).to(
            self.data_type
        )
        global_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        local_lens = self._get_dcp_local_seq_lens(global_lens)
        return self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size if parallel.dcp_enabled else 1,
            cp_rank=parallel.dcp_rank if parallel.dcp_enabled else 0,
            return_lse=parallel.dcp_enabled,
        )

    # idiom: layers/attention/trtllm_mla_backend.py forward_extend draft_extend branch on cute-dsl; multi-token query under DCP whose causal_seqs is the rank-local length, not the global bound
    # expect: SG203
    def _forward_draft_extend(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        parallel = get_parallel()
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        query = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim).to(
            self.data_type
        )
        local_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        return self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            layer=layer,
            causal_seqs=local_lens,
            cp_world=parallel.dcp_size if parallel.dcp_enabled else 1,
            cp_rank=parallel.dcp_rank if parallel.dcp_enabled else 0,
            return_lse=parallel.dcp_enabled,
        )

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel; the launch is bound once per step with functools.partial over forward_batch.seq_lens (whole) as seq_lens
    # expect: SG203
    def _decode_with_partial(
        self,
        queries: List[Tuple[torch.Tensor, "RadixAttention"]],
        forward_batch: ForwardBatch,
    ) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        run = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=global_lens,
            max_seq_len=metadata.max_seq_len_k,
            backend="cute-dsl",
            enable_dcp=self.shard.enabled,
            cp_world=self.shard.size,
            cp_rank=self.shard.rank,
            causal_seqlens_kv_global=global_lens if self.shard.enabled else None,
            return_lse=True,
        )
        outs = []
        for query, layer in queries:
            outs.append(
                run(
                    query=query,
                    kv_cache=self._kv_cache_for(layer),
                    bmm1_scale=self._compute_decode_bmm1_scale(layer),
                )
            )
        return outs

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel; partial-bound launch takes the rank-local lengths and the global ones as causal_seqlens_kv_global
    # expect: clean
    def _decode_with_partial_local(
        self,
        queries: List[Tuple[torch.Tensor, "RadixAttention"]],
        forward_batch: ForwardBatch,
    ) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        run = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=self.shard.localize(global_lens),
            max_seq_len=metadata.max_seq_len_k,
            backend="cute-dsl",
            enable_dcp=self.shard.enabled,
            cp_world=self.shard.size,
            cp_rank=self.shard.rank,
            causal_seqlens_kv_global=global_lens if self.shard.enabled else None,
            return_lse=True,
        )
        return [
            run(
                query=query,
                kv_cache=self._kv_cache_for(layer),
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
            )
            for query, layer in queries
        ]

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode hoisted-lens path; KvLens dataclass built, but lens.global_ is passed as seq_lens (and causal_seqs)
    # expect: SG203
    def _forward_decode_kvlens(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        parallel = get_parallel()
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        max_seq = (
            int(forward_batch.seq_lens_cpu.max().item())
            if forward_batch.seq_lens_cpu is not None
            else self.max_context_len
        )
        lens = KvLens.of(forward_batch.seq_lens[:bs], max_seq, self.shard)
        return self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.global_,
            max_seq_len=lens.max_local,
            layer=layer,
            causal_seqs=lens.global_,
            cp_world=parallel.dcp_size if parallel.dcp_enabled else 1,
            cp_rank=parallel.dcp_rank if parallel.dcp_enabled else 0,
            return_lse=True,
        )


class BlockwiseCuteDslMLABackend(ForkCuteDslMLABackend):
    """Variant that launches per 64-request block to bound workspace."""

    BLOCK = 64

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode; per-block launch takes seq_lens from the inherited _kv_lens_for helper (whole lengths) under DCP
    # expect: SG203
    def _decode_blockwise(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        parallel = get_parallel()
        metadata = self._metadata_for(forward_batch)
        kv_lens = self._kv_lens_for(forward_batch)
        outs, lses = [], []
        for start in range(0, forward_batch.batch_size, self.BLOCK):
            end = min(start + self.BLOCK, forward_batch.batch_size)
            out, lse = self._run_decode_kernel(
                query=query[start:end],
                kv_cache=self._kv_cache_for(layer),
                block_tables=metadata.block_kv_indices[start:end],
                seq_lens=kv_lens[start:end],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                causal_seqs=kv_lens[start:end],
                cp_world=parallel.dcp_size if parallel.dcp_enabled else 1,
                cp_rank=parallel.dcp_rank if parallel.dcp_enabled else 0,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        return torch.cat(outs, dim=0), torch.cat(lses, dim=0)
