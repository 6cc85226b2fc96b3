"""TRT-LLM MLA backend variants for decode context parallelism (DCP).

Under DCP each rank holds a cyclic slice of the KV cache.  With DCP on,
``TRTLLMMLABackend.init_forward_metadata`` (and the graph replay body) leave
``metadata.block_kv_indices`` as this rank's page table, ``seq_lens_k`` as the
rank-local lengths and ``global_seq_lens_k`` as the global ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention


class ForkTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm_mla with the fork's decode / draft-extend entry points."""

    def _kv_cache_view(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _decode_metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _finish_dcp(self, raw_out, lse, local_seq_lens, layer, bs, q_len=1):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        q_indptr = self.q_indptr_decode[: bs + 1] * q_len
        fixup_zero_kv_rows(output, lse, local_seq_lens, q_indptr, q_len)
        return output.flatten(1), lse

    # expect: SG203
    def decode_dcp_trtllm_gen(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        metadata = self._decode_metadata(forward_batch)
        kv_cache = self._kv_cache_view(layer)
        if not get_parallel().dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="trtllm-gen",
            return_lse=True,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        )
        return self._finish_dcp(raw_out, lse, seq_lens, layer, bs)

    # expect: clean
    def decode_dcp_hooked(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        metadata = self._decode_metadata(forward_batch)
        kv_cache = self._kv_cache_view(layer)
        if not get_parallel().dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        bs = forward_batch.batch_size
        local_seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, local_seq_lens, layer, bs)

    # expect: SG203
    def decode_dcp_planned_lens(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        assert get_parallel().dcp_enabled
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        local_seq_lens = self._get_dcp_local_seq_lens(metadata.seq_lens_k[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, local_seq_lens, layer, bs)

    # expect: clean
    def decode_dcp_batch_lens(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        assert get_parallel().dcp_enabled
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, local_seq_lens, layer, bs)

    # expect: SG203
    def draft_extend_dcp_direct(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        assert forward_batch.forward_mode.is_draft_extend_v2()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        q = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        kv_cache = self._kv_cache_view(layer)
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
                max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
                backend="trtllm-gen",
                return_lse=True,
            )
            return self._finish_dcp(
                raw_out, lse, metadata.seq_lens_k, layer, bs, q_len=tokens_per_seq
            )
        raw_out = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: clean
    def draft_extend_dcp_hooked(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        assert forward_batch.forward_mode.is_draft_extend_v2()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        q = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        raw_out = self._run_decode_kernel(
            query=q,
            kv_cache=self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class PortedTRTLLMMLABackend(TRTLLMMLABackend):
    """Kernel hook carried over from the fork's earlier trtllm_mla port."""

    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ) -> torch.Tensor:
        if cp_world > 1 or return_lse:
            raise NotImplementedError(
                "trtllm_mla does not forward the cyclic DCP metadata to its "
                "decode kernel; select cutedsl_mla for a DCP target-verify run"
            )
        seq_lens_i32 = (
            seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32)
        )
        extra_kwargs = {"backend": self.backend} if self.backend != "trtllm-gen" else {}
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens_i32,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            **extra_kwargs,
        )


class StepGraphTRTLLMMLABackend(TRTLLMMLABackend):
    """Graph replay body that refreshes each mode's lengths separately."""

    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if forward_mode.is_target_verify():
            torch.add(
                seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k
            )
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
            local_seq_lens = metadata.seq_lens_k
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
            local_seq_lens = metadata.seq_lens_k
        else:
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(seq_lens)
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )


class UnifiedGraphTRTLLMMLABackend(TRTLLMMLABackend):
    """Graph replay body shared by all decode-family modes."""

    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if forward_mode.is_target_verify():
            global_seq_lens = seq_lens[:bs] + self.num_draft_tokens
        else:
            global_seq_lens = seq_lens[:bs]
        if forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
        metadata.global_seq_lens_k.copy_(global_seq_lens)
        metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(global_seq_lens))
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )
