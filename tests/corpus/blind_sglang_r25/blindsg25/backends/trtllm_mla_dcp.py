"""trtllm-gen MLA backends used on the fork's DCP decode deployments.

``RankLocalTRTLLMMLABackend`` is what production runs; the other classes are
kept for the A/B deployments that still pin them (see configs/mla_dcp_*.yaml).
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel

from blindsg25.utils.dcp_lens import host_decode_lens, rank_local_lens
from blindsg25.utils.mla_launch import launch_trtllm_mla_decode
from blindsg25.utils.mla_prep import (
    decode_metadata,
    paged_kv_cache,
    prepare_decode_query,
)

logger = logging.getLogger(__name__)


class RankLocalTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm-gen decode over this DCP rank's cyclic KV slice."""

    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (0.5.23 refusal)
        # expect: clean
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and (
            q_len > 1 or causal_seqs is not None or not return_lse
        ):
            raise NotImplementedError(
                "trtllm_mla cannot forward a global causal bound to its decode "
                "kernel; select cutedsl_mla for a DCP speculative run"
            )
        return launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
        )

    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
        # expect: clean
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (DCP early return)
        # expect: clean
        query = prepare_decode_query(
            self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache
        )
        kv_cache = paged_kv_cache(self, layer)
        metadata = decode_metadata(self, forward_batch)
        if get_parallel().dcp_enabled:
            return self._forward_decode_dcp(query, kv_cache, metadata, layer, forward_batch)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=(
                metadata.seq_lens_k
                if metadata.seq_lens_k is not None
                else forward_batch.seq_lens
            ),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP spec refused)
        # expect: clean
        mode = forward_batch.forward_mode
        if (
            mode.is_target_verify() or mode.is_draft_extend_v2()
        ) and get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm_mla has no global causal bound for DCP with q_len > 1 "
                "(target verify / draft extend); use cutedsl_mla"
            )
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )


class LegacyDcpTRTLLMMLABackend(TRTLLMMLABackend):
    """Pre-0.5.20 DCP port (rank-local LSE, kernel-side cyclic table)."""

    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        # idiom: layers/attention/trtllm_mla_backend.py (0.5.18) TRTLLMMLABackend._run_decode_kernel -- path: DCP with a multi-token query and cp_world left at 1
        # expect: SG203
        if cp_world > 1:
            raise NotImplementedError(
                "trtllm_mla does not forward the cyclic DCP metadata to its "
                "decode kernel; select cutedsl_mla for a DCP target-verify run"
            )
        # The cross-rank merge needs each rank's LSE whenever DCP is on.
        return_lse = return_lse or get_parallel().dcp_enabled
        return launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
        )

    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
        # expect: SG203
        bs = forward_batch.batch_size
        # int32 already; the raw batch lens skip a per-layer view of the metadata.
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/trtllm_mla_backend.py (0.5.18) TRTLLMMLABackend.forward_decode -- path: DCP with metadata.seq_lens_k None
        # expect: SG203
        query = prepare_decode_query(
            self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache
        )
        kv_cache = paged_kv_cache(self, layer)
        metadata = decode_metadata(self, forward_batch)
        dcp = get_parallel().dcp_enabled
        out = launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=(
                metadata.seq_lens_k
                if metadata.seq_lens_k is not None
                else forward_batch.seq_lens
            ),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = out
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse.view(
                -1, layer.tp_q_head_num
            )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/trtllm_mla_backend.py (0.5.18) TRTLLMMLABackend.forward_extend (draft extend)
        # expect: SG203
        if not (
            forward_batch.forward_mode.is_draft_extend_v2()
            and get_parallel().dcp_enabled
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        bs = forward_batch.batch_size
        metadata = decode_metadata(self, forward_batch)
        tokens_per_seq = q.shape[0] // bs
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = torch.cat([q_nope, q_pe], dim=-1).to(self.data_type)
        query = query.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        # NOTE(draft_extend seq_len handling): pad every row to the widest query.
        seq_lens_k = (
            forward_batch.seq_lens - forward_batch.extend_seq_lens + tokens_per_seq
        ).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            layer=layer,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse.view(
            -1, layer.tp_q_head_num
        )


class PaddedDcpTRTLLMMLABackend(TRTLLMMLABackend):
    """DCP decode that tolerates DP-padded batches without re-planning."""

    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (padded-batch fallback) -- path: DCP with seq_lens_k None or smaller than the padded batch
        # expect: SG203
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is None or metadata.seq_lens_k.shape[0] < bs:
            # DP padding grew the batch past the plan; the padded rows carry
            # seq_len fill values, so read the batch lens directly.
            seq_lens = forward_batch.seq_lens[:bs]
        else:
            seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (DCP branch inlined)
        # expect: SG203
        query = prepare_decode_query(
            self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache
        )
        kv_cache = paged_kv_cache(self, layer)
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        if get_parallel().dcp_enabled:
            # Both lens are maintained once per step; the kernel schedules on
            # the global one.
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.global_seq_lens_k[:bs],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse.view(
                -1, layer.tp_q_head_num
            )
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class HostMirrorTRTLLMMLABackend(TRTLLMMLABackend):
    """Reads the scheduler's host seq_lens mirror when it is published."""

    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (lens via utils helper) -- path: DCP with forward_batch.seq_lens_cpu published
        # expect: SG203
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = prepare_decode_query(
            self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache
        )
        kv_cache = paged_kv_cache(self, layer)
        metadata = decode_metadata(self, forward_batch)
        seq_lens = host_decode_lens(forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse.view(
            -1, layer.tp_q_head_num
        )

    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (lens via utils helper)
        # expect: clean
        bs = forward_batch.batch_size
        local_seq_lens = rank_local_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    def _forward_decode_paged(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (page-size special case) -- path: DCP with page_size > 1
        # expect: SG203
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        if get_parallel().dcp_enabled and self.page_size == 1:
            seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        else:
            # Paged layouts: the rank-local page table already bounds the walk.
            seq_lens = global_seq_lens.to(torch.int32)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )

    def _forward_decode_any_page(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (every page size)
        # expect: clean
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        if get_parallel().dcp_enabled:
            # Rank-local share for every layout: the page table only bounds
            # which pages exist, the kernel walks seq_lens[i] tokens of them.
            seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        else:
            seq_lens = global_seq_lens.to(torch.int32)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )
