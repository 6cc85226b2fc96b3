"""Absorbed-MLA attention core for the fork's DeepSeek variant that calls the
FlashInfer MLA decode kernel directly from the model (bypassing the
attention backend's forward_decode) so it can fuse the DCP merge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

import torch
from torch import nn

from blindsg19.common.dcp_lens import rank_local_lens, rank_local_lens_from_group
from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.model_executor.forward_context import get_token_to_kv_pool
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class DCPAbsorbedMLAAttention(nn.Module):
    def __init__(
        self,
        layer_id: int,
        num_local_heads: int,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        scaling: float,
        page_size: int,
        workspace_buffer: torch.Tensor,
    ):
        super().__init__()
        self.layer_id = layer_id
        self.num_local_heads = num_local_heads
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.scaling = scaling
        self.page_size = page_size
        self.workspace_buffer = workspace_buffer

    def _kv_cache(self) -> torch.Tensor:
        k_cache = get_token_to_kv_pool().get_key_buffer(self.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _launch(self, query, block_tables, seq_lens, max_seq_len, **kwargs):
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._kv_cache(),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self.scaling,
            **kwargs,
        )

    # expect: SG203
    def forward_absorb_core(
        self, q_absorbed: torch.Tensor, forward_batch: "ForwardBatch"
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        query = q_absorbed.view(bs, 1, -1, self.kv_lora_rank + self.qk_rope_head_dim)
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        dcp_world = get_dcp_world_size()
        if dcp_world > 1:
            out, lse = self._launch(
                query,
                metadata.block_kv_indices,
                kv_lens,
                metadata.max_seq_len_k,
                backend="cute-dsl",
                enable_dcp=True,
                cp_world=dcp_world,
                cp_rank=get_dcp_rank(),
                causal_seqlens_kv_global=kv_lens,
                return_lse=True,
            )
        else:
            out, lse = self._launch(
                query,
                metadata.block_kv_indices,
                kv_lens,
                metadata.max_seq_len_k,
                return_lse=True,
            )
        return out.view(bs, -1, self.kv_lora_rank), lse

    # expect: clean
    def forward_absorb_core_local(
        self, q_absorbed: torch.Tensor, forward_batch: "ForwardBatch"
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        query = q_absorbed.view(bs, 1, -1, self.kv_lora_rank + self.qk_rope_head_dim)
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        dcp_world = get_dcp_world_size()
        if dcp_world > 1:
            local_lens = get_dcp_lens(global_lens, dcp_world, get_dcp_rank()).to(
                torch.int32
            )
            out, lse = self._launch(
                query,
                metadata.block_kv_indices,
                local_lens,
                metadata.max_seq_len_k,
                backend="cute-dsl",
                enable_dcp=True,
                cp_world=dcp_world,
                cp_rank=get_dcp_rank(),
                causal_seqlens_kv_global=global_lens,
                return_lse=True,
            )
            out = out.view(bs, -1, self.kv_lora_rank)
            fixup_zero_kv_rows(
                out, lse, local_lens,
                torch.arange(bs + 1, dtype=torch.int32, device=out.device), 1,
            )
            return out, lse
        out, lse = self._launch(
            query,
            metadata.block_kv_indices,
            global_lens,
            metadata.max_seq_len_k,
            return_lse=True,
        )
        return out.view(bs, -1, self.kv_lora_rank), lse

    # expect: SG203
    def forward_absorb_verify(
        self, q_absorbed: torch.Tensor, forward_batch: "ForwardBatch"
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Target verify: every request carries draft_token_num query rows."""
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = q_absorbed.view(bs, ndt, -1, self.kv_lora_rank + self.qk_rope_head_dim)
        verify_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        if get_dcp_world_size() > 1:
            # This rank's KV share of each verify window.
            verify_lens = rank_local_lens_from_group(verify_lens)
        out, lse = self._launch(
            query,
            metadata.block_kv_indices,
            verify_lens,
            metadata.max_seq_len_k,
            return_lse=True,
        )
        return out.view(bs * ndt, -1, self.kv_lora_rank), lse

    # expect: clean
    def forward_absorb_mtp(
        self, q_absorbed: torch.Tensor, forward_batch: "ForwardBatch"
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Target verify / draft extend with several query rows per request."""
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        rows = q_absorbed.shape[0] // max(bs, 1)
        if get_dcp_world_size() > 1 and rows > 1:
            raise NotImplementedError(
                "multi-token MLA decode under DCP needs a per-token global causal "
                "bound; route MTP through the cute-dsl attention backend"
            )
        query = q_absorbed.view(bs, rows, -1, self.kv_lora_rank + self.qk_rope_head_dim)
        extra = rows if forward_batch.forward_mode.is_target_verify() else 0
        kv_lens = rank_local_lens(forward_batch.seq_lens[:bs] + extra)
        out, lse = self._launch(
            query,
            metadata.block_kv_indices,
            kv_lens,
            metadata.max_seq_len_k,
            return_lse=True,
        )
        return out.view(bs * rows, -1, self.kv_lora_rank), lse
