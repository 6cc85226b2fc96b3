"""cute-dsl MLA multi-token (draft-extend / target-verify) paths under DCP."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


class _DcpLaunch:
    """Bundles the per-forward arguments of one DCP MLA decode launch."""

    def __init__(self, backend, forward_batch: ForwardBatch, layer, block_tables, max_seq_len):
        self.backend = backend
        self.fb = forward_batch
        self.layer = layer
        self.block_tables = block_tables
        self.max_seq_len = max_seq_len
        parallel = get_parallel()
        self.cp_world = parallel.dcp_size
        self.cp_rank = parallel.dcp_rank

    @property
    def global_lens(self) -> torch.Tensor:
        return self.fb.seq_lens[: self.fb.batch_size].to(torch.int32)

    def _launch(self, query, kv_cache, seq_lens):
        b = self.backend
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=b.workspace_buffer,
            qk_nope_head_dim=b.qk_nope_head_dim,
            kv_lora_rank=b.kv_lora_rank,
            qk_rope_head_dim=b.qk_rope_head_dim,
            block_tables=self.block_tables,
            seq_lens=seq_lens,
            max_seq_len=self.max_seq_len,
            bmm1_scale=b._compute_decode_bmm1_scale(self.layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=self.cp_world,
            cp_rank=self.cp_rank,
            causal_seqlens_kv_global=self.global_lens,
            return_lse=True,
        )


class WholeLenLaunch(_DcpLaunch):
    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        return self.global_lens

    # expect: SG203
    def run(self, query, kv_cache):
        return self._launch(query, kv_cache, self.kernel_seq_lens)


class ShardLenLaunch(_DcpLaunch):
    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        return get_dcp_lens(self.global_lens, self.cp_world, self.cp_rank).to(torch.int32)

    # expect: clean
    def run(self, query, kv_cache):
        return self._launch(query, kv_cache, self.kernel_seq_lens)


class DraftExtendCuteDslBackend(CuteDslMLABackend):
    def _dcp_kernel_common(self, layer, kv_cache, metadata):
        return dict(
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
        )

    # expect: SG203
    def dcp_draft_extend(self, q, layer, forward_batch: ForwardBatch, kv_cache, metadata):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        num_tokens = q.shape[0] // bs
        query = q.view(bs, num_tokens, layer.tp_q_head_num, layer.head_dim)
        local = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        if parallel.dcp_size > 1:
            raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=query,
                seq_lens=local,
                enable_dcp=True,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
                **self._dcp_kernel_common(layer, kv_cache, metadata),
            )
            return raw_out, lse
        return super()._run_decode_kernel(
            query, kv_cache, metadata.block_kv_indices, forward_batch.seq_lens[:bs],
            metadata.max_seq_len_k, layer,
        )

    # expect: clean
    def dcp_draft_extend_refusing(self, q, layer, forward_batch: ForwardBatch, kv_cache, metadata):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        num_tokens = q.shape[0] // bs
        query = q.view(bs, num_tokens, layer.tp_q_head_num, layer.head_dim)
        if parallel.dcp_size > 1 and num_tokens > 1:
            raise NotImplementedError(
                "draft extend under DCP needs a per-query global causal bound"
            )
        local = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        if parallel.dcp_size > 1:
            raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=query,
                seq_lens=local,
                enable_dcp=True,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                causal_seqlens_kv_global=forward_batch.seq_lens[:bs].to(torch.int32),
                return_lse=True,
                **self._dcp_kernel_common(layer, kv_cache, metadata),
            )
            return raw_out, lse
        return super()._run_decode_kernel(
            query, kv_cache, metadata.block_kv_indices, forward_batch.seq_lens[:bs],
            metadata.max_seq_len_k, layer,
        )

    # expect: SG203
    def dcp_target_verify(self, q, layer, forward_batch: ForwardBatch, kv_cache, metadata):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return None
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        verify_lens = metadata.global_seq_lens_k[:bs]
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            seq_lens=verify_lens,
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=verify_lens,
            return_lse=True,
            **self._dcp_kernel_common(layer, kv_cache, metadata),
        )

    # expect: clean
    def dcp_target_verify_local(self, q, layer, forward_batch: ForwardBatch, kv_cache, metadata):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return None
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        global_lens = metadata.global_seq_lens_k[:bs]
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            seq_lens=get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
                torch.int32
            ),
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_lens,
            return_lse=True,
            **self._dcp_kernel_common(layer, kv_cache, metadata),
        )

    # expect: clean
    def verify_via_cute_hook(self, q, layer, forward_batch: ForwardBatch, kv_cache, metadata):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        global_lens = forward_batch.seq_lens[:bs]
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._get_dcp_local_seq_lens(global_lens),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
