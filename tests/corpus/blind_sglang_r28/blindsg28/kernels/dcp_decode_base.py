"""Kernels-team base for the DCP MLA decode ports.

``init_forward_metadata`` fills a :class:`DcpDecodeMetadata` (rank-local page
table and lengths, plus the whole-sequence lengths for causal bounds);
``forward_decode`` / ``forward_extend`` read it. Deployment variants subclass
this and override one method.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg28.kernels import kernels
from blindsg28.kernels.metadata import DcpDecodeMetadata


class ForkDcpDecodeBase(TRTLLMMLABackend):
    fork_metadata: Optional[DcpDecodeMetadata] = None
    decode_chunk: int = 64

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        # Upstream metadata stays valid for the non-DCP / extend paths.
        super().init_forward_metadata(forward_batch)
        mode = forward_batch.forward_mode
        bs = forward_batch.batch_size
        if bs == 0 or not (mode.is_decode_or_idle() or mode.is_target_verify()):
            self.fork_metadata = None
            return
        extra = self.num_draft_tokens if mode.is_target_verify() else 0
        global_lens = (forward_batch.seq_lens[:bs] + extra).to(torch.int32)
        if forward_batch.seq_lens_cpu is not None:
            max_global = int(forward_batch.seq_lens_cpu[:bs].max().item()) + extra
        else:
            max_global = self.max_context_len + extra
        # _create_block_kv_indices takes whole-sequence lengths and builds the
        # rank-local table itself under DCP.
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_global),
            forward_batch.req_pool_indices,
            global_lens,
            global_lens.device,
        )
        self.fork_metadata = DcpDecodeMetadata(
            block_kv_indices=block_kv_indices,
            local_seq_lens=self._get_dcp_local_seq_lens(global_lens),
            global_seq_lens=global_lens,
            max_local_len=self._get_dcp_local_max_seq_len(max_global),
            batch_size=bs,
            q_len=self.num_draft_tokens if mode.is_target_verify() else 1,
        )

    # ---- shared plumbing ----
    def _metadata_for(self, forward_batch: ForwardBatch) -> DcpDecodeMetadata:
        md = self.fork_metadata
        if md is None or md.batch_size < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            md = self.fork_metadata
        return md

    def _decode_query(
        self,
        q: torch.Tensor,
        k: Optional[torch.Tensor],
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
    ) -> torch.Tensor:
        if save_kv_cache and k is not None:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_pe = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = concat_mla_absorb_q_general(q_nope, q_pe)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        return query.to(self.data_type)

    def _paged_kv(self, layer: RadixAttention) -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _kernel_dims(self, layer: RadixAttention) -> dict:
        return {
            "workspace": self.workspace_buffer,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "bmm1_scale": self._compute_decode_bmm1_scale(layer),
        }

    def _dcp_args(self) -> dict:
        parallel = get_parallel()
        return {"cp_world": parallel.dcp_size, "cp_rank": parallel.dcp_rank}

    def _rank_local_state(
        self,
        raw_out: torch.Tensor,
        lse: torch.Tensor,
        layer: RadixAttention,
        local_lens: torch.Tensor,
        bs: int,
        q_len: int = 1,
    ):
        out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        qo_indptr = (
            self.q_indptr_decode[: bs + 1]
            if q_len == 1
            else self._dense_q_indptr(bs, q_len)
        )
        fixup_zero_kv_rows(out, lse, local_lens, qo_indptr, q_len)
        return out.flatten(1), lse

    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp, twist: fork metadata dataclass carries the rank-local lengths into a generic launch helper (single-token query, no causal bound needed)
    # expect: clean
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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        local_lens = md.local_seq_lens[:bs]
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            local_lens,
            md.max_local_len,
            counter_buffer=self._multi_ctas_kv_counter_buffer,
            return_lse=True,
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, local_lens, bs)
