"""TRT-LLM MLA backend fork: DCP decode / verify / draft-extend entry points.

Metadata comes from ``TRTLLMMLABackend.init_forward_metadata`` (0.5.23), which
under DCP stores the rank-local page table in ``block_kv_indices``, the
rank-local lengths in ``seq_lens_k`` and the global ones in
``global_seq_lens_k``.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


class ForkTRTLLMMLABackend(TRTLLMMLABackend):
    def _metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        metadata = getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        if metadata is None:
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata

    def _plain_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer,
        return_lse: bool = False,
    ):
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
        )

    # expect: SG203
    def decode_dcp_direct(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        if query.dim() == 3:
            query = query.unsqueeze(1)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse

    # expect: clean
    def decode_dcp_fixup(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        if query.dim() == 3:
            query = query.unsqueeze(1)
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
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    # expect: SG203
    def verify_dcp_gen(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_target_verify()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.to(self.data_type).view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        if get_parallel().dcp_enabled:
            raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=q,
                kv_cache=kv_cache,
                workspace_buffer=self.workspace_buffer,
                qk_nope_head_dim=self.qk_nope_head_dim,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
                return_lse=True,
            )
            output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, -1)
            return output.flatten(1), lse.view(bs * draft_token_num, -1)
        raw_out = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + draft_token_num,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: clean
    def verify_non_dcp_only(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_target_verify()
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm-gen has no global causal bound for a multi-token DCP "
                "verify; use the cutedsl_mla backend"
            )
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.to(self.data_type).view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        raw_out = self._plain_kernel(
            q,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k + draft_token_num,
            layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: SG203
    def decode_dcp_rebuild_table(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        bs = forward_batch.batch_size
        max_seq = int(forward_batch.seq_lens_cpu.max().item())
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens)
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            local_seq_lens,
            local_seq_lens.device,
        )
        if query.dim() == 3:
            query = query.unsqueeze(1)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
            layer=layer,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse

    # expect: clean
    def decode_dcp_fresh_table(
        self, query, kv_cache, layer, forward_batch: ForwardBatch
    ):
        assert forward_batch.forward_mode.is_decode_or_idle()
        bs = forward_batch.batch_size
        max_seq = int(forward_batch.seq_lens_cpu.max().item())
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            forward_batch.seq_lens.device,
        )
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
            layer=layer,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse

    # expect: clean
    def decode_split_by_dcp(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        metadata = self._metadata(forward_batch)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        if get_parallel().dcp_enabled:
            return self._forward_decode_dcp(
                query, kv_cache, metadata, layer, forward_batch
            )
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: SG203
    def draft_extend_dcp(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_draft_extend_v2()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        total_tokens = q.shape[0]
        tokens_per_seq = total_tokens // bs
        q = q.to(self.data_type).view(
            bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim
        )
        raw_out, lse = self._plain_kernel(
            q,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k + tokens_per_seq,
            layer,
            return_lse=True,
        )
        return raw_out.reshape(total_tokens, -1), lse

    # expect: clean
    def verify_dcp_cute(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_target_verify()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.to(self.data_type).view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            raw_out = self._plain_kernel(
                q,
                kv_cache,
                metadata.block_kv_indices,
                metadata.seq_lens_k,
                metadata.max_seq_len_k + draft_token_num,
                layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=metadata.global_seq_lens_k.to(torch.int32),
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, -1)
        return output.flatten(1), lse.view(bs * draft_token_num, -1)
