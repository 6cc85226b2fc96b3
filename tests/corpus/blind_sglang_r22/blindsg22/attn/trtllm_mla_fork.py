"""TRT-LLM MLA backend fork: a leaner DCP decode and a draft-extend fast path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple, Union

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg22.attn.mla_common import (
    build_mla_query,
    finish_dcp_decode,
    mla_kv_cache,
    save_mla_kv,
)

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

DecodeOut = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]


class ForkTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm_mla with the fork's decode entry points."""

    def _metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (q_len == 1 DCP decode through _run_decode_kernel)
    # expect: SG203
    def forward_decode_dcp_fast(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ) -> DecodeOut:
        if save_kv_cache:
            save_mla_kv(self, layer, forward_batch, k, k_rope)
        query = build_mla_query(q, q_rope, layer, 1)
        kv_cache = mla_kv_cache(self, layer)
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
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
        # Single query token: the rank-local page table is enough, no causal
        # bound needed; the cross-rank merge wants the LSE.
        seq_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (rank-local lens from _get_dcp_local_seq_lens)
    # expect: clean
    def forward_decode_dcp_local(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ) -> DecodeOut:
        if save_kv_cache:
            save_mla_kv(self, layer, forward_batch, k, k_rope)
        query = build_mla_query(q, q_rope, layer, 1)
        kv_cache = mla_kv_cache(self, layer)
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
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
        seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (TRTLLMMLADecodeMetadata built inline, no DCP localization)
    # expect: SG203
    def forward_decode_fork_metadata(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        bs = forward_batch.batch_size
        max_seq = self.max_context_len
        metadata = TRTLLMMLADecodeMetadata(
            block_kv_indices=self._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                bs,
                self._calc_padded_blocks(max_seq),
                forward_batch.req_pool_indices,
                forward_batch.seq_lens,
                forward_batch.seq_lens.device,
            ),
            max_seq_len_k=self._get_dcp_local_max_seq_len(max_seq),
            seq_lens_k=forward_batch.seq_lens.to(torch.int32),
        )
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, metadata.seq_lens_k, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (DCP branch: global_seq_lens_k kept, seq_lens_k localized)
    # expect: clean
    def forward_decode_fork_metadata_local(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        bs = forward_batch.batch_size
        max_seq = self.max_context_len
        global_lens = forward_batch.seq_lens.to(torch.int32)
        metadata = TRTLLMMLADecodeMetadata(
            block_kv_indices=self._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                bs,
                self._calc_padded_blocks(max_seq),
                forward_batch.req_pool_indices,
                forward_batch.seq_lens,
                forward_batch.seq_lens.device,
            ),
            max_seq_len_k=self._get_dcp_local_max_seq_len(max_seq),
            seq_lens_k=self._get_dcp_local_seq_lens(global_lens),
            global_seq_lens_k=global_lens,
        )
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, metadata.seq_lens_k, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend branch, direct trtllm-gen launch)
    # expect: SG203
    def forward_draft_extend_fast(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> torch.Tensor:
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        query = build_mla_query(q, q_rope, layer, tokens_per_seq).to(self.data_type)
        dcp_enabled = get_parallel().dcp_enabled
        # Under DCP, init_forward_metadata already left rank-local lengths in
        # seq_lens_k and a rank-local page table.
        max_seq_len = metadata.max_seq_len_k + (0 if dcp_enabled else tokens_per_seq)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=mla_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP with q_len > 1 refused up front)
    # expect: clean
    def forward_draft_extend_fast_refusing(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> torch.Tensor:
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "draft-extend fast path has no global causal bound; "
                "use cutedsl_mla for DCP speculative decoding"
            )
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        query = build_mla_query(q, q_rope, layer, tokens_per_seq).to(self.data_type)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=mla_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


    # ------------------------------------------------------------------
    # Target verify as q_len == 1 rows (trtllm-gen accepts those under DCP).
    # ------------------------------------------------------------------

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (one q_len == 1 row per draft token so the DCP check passes)
    # expect: SG203
    def forward_verify_dcp_rows(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> DecodeOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        if not parallel.dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=build_mla_query(q, q_rope, layer, draft_token_num),
                kv_cache=mla_kv_cache(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k + draft_token_num,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        verify_lens = forward_batch.seq_lens[:bs] + draft_token_num
        local_lens = self._get_dcp_local_seq_lens(verify_lens)
        row_lens = local_lens.repeat_interleave(draft_token_num)
        row_tables = metadata.block_kv_indices[:bs].repeat_interleave(
            draft_token_num, dim=0
        )
        num_rows = bs * draft_token_num
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=row_tables,
            seq_lens=row_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        row_indptr = torch.arange(num_rows + 1, dtype=torch.int32, device=q.device)
        return finish_dcp_decode(raw_out, lse, row_lens, row_indptr, layer)

    # idiom: sglang/srt/layers/dcp/layout.py get_dcp_chain_spec_lens (per-token rank-local frontiers) feeding TRTLLMMLABackend._run_decode_kernel one row per draft token
    # expect: clean
    def forward_verify_dcp_chain_rows(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> DecodeOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        if not parallel.dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=build_mla_query(q, q_rope, layer, draft_token_num),
                kv_cache=mla_kv_cache(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k + draft_token_num,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        verify_lens = forward_batch.seq_lens[:bs] + draft_token_num
        # Each draft token gets its own causal frontier within this rank's
        # interleaved slice, so every row is an ordinary one-token decode.
        row_lens = get_dcp_chain_spec_lens(
            verify_lens, draft_token_num, parallel.dcp_size, parallel.dcp_rank
        )
        row_tables = metadata.block_kv_indices[:bs].repeat_interleave(
            draft_token_num, dim=0
        )
        num_rows = bs * draft_token_num
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=row_tables,
            seq_lens=row_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        row_indptr = torch.arange(num_rows + 1, dtype=torch.int32, device=q.device)
        return finish_dcp_decode(raw_out, lse, row_lens, row_indptr, layer)


class ForkReplayTRTLLMMLABackend(TRTLLMMLABackend):
    """Graph-replay body simplified by the fork (one copy per buffer)."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (replay refresh of the capture-stable lens read by _forward_decode_dcp)
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        seq_lens = seq_lens[:bs]
        if forward_mode.is_target_verify():
            seq_lens = seq_lens + self.num_draft_tokens
        # Both length buffers are refreshed once per step.
        metadata.global_seq_lens_k.copy_(seq_lens)
        metadata.seq_lens_k.copy_(seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(seq_lens),
        )


class ForkReplayLocalTRTLLMMLABackend(TRTLLMMLABackend):
    """Same simplified replay body, rank-local lens in the local buffer."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        seq_lens = seq_lens[:bs]
        if forward_mode.is_target_verify():
            seq_lens = seq_lens + self.num_draft_tokens
        local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        metadata.global_seq_lens_k.copy_(seq_lens)
        metadata.seq_lens_k.copy_(local_seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )
