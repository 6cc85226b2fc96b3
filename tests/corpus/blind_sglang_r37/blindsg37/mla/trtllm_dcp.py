"""TRTLLM MLA under decode context parallelism (DCP).

Fork-side subclasses of ``TRTLLMMLABackend``: rank-local decode, the DCP
CUDA-graph capture/replay body, and the spec (target-verify / draft-extend)
launches. All of them run with ``attention_backend=trtllm_mla`` and
``--dcp-size > 1`` in the DSR1 / Kimi serving configs.
"""

from __future__ import annotations

from typing import Optional

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


class _DcpDecodeHelpers:
    def _decode_metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _finish_dcp(self, raw_out, lse, local_seq_lens, layer, bs):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class BatchLensTRTLLMMLABackend(_DcpDecodeHelpers, TRTLLMMLABackend):
    """Recomputes the decode lengths from the batch on every layer."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
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
        return self._finish_dcp(raw_out, lse, seq_lens, layer, bs)


class ShardLensTRTLLMMLABackend(_DcpDecodeHelpers, TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
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
        return self._finish_dcp(raw_out, lse, seq_lens, layer, bs)


class DcpGraphMetadataV1(TRTLLMMLABackend):
    """CUDA-graph capture/replay body as first ported from cutedsl (0.5.18)."""

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._apply_cuda_graph_metadata (0.5.18)
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(self, bs, req_pool_indices, seq_lens, forward_mode, metadata):
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
            local_seq_lens = metadata.seq_lens_k
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            seq_lens = seq_lens[:bs]
            metadata.seq_lens_k.copy_(seq_lens)
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        else:
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
            local_seq_lens = metadata.seq_lens_k
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )


class DcpGraphMetadataV2(TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(self, bs, req_pool_indices, seq_lens, forward_mode, metadata):
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
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
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
            local_seq_lens = metadata.seq_lens_k
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )


class _DraftExtendDcpLauncher:
    """Shared draft-extend launch used by the two kernel-hook variants below."""

    def _draft_extend_query(self, q, layer, bs):
        total_tokens = q.shape[0]
        tokens_per_seq = total_tokens // bs
        return q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim), tokens_per_seq


class LegacyHookTRTLLMMLABackend(_DraftExtendDcpLauncher, TRTLLMMLABackend):
    """Keeps the 0.5.18 kernel hook."""

    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if cp_world > 1 or return_lse:
            raise NotImplementedError(
                "trtllm_mla does not forward the cyclic DCP metadata to its "
                "decode kernel; select cutedsl_mla for a DCP target-verify run"
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
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            **extra_kwargs,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend_v2 branch, 0.5.18)
    # expect: SG203
    def forward_draft_extend(self, q, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        q, tokens_per_seq = self._draft_extend_query(q.to(self.data_type), layer, bs)
        raw_out = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class UpstreamHookTRTLLMMLABackend(_DraftExtendDcpLauncher, TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend_v2 branch, 0.5.18)
    # expect: clean
    def forward_draft_extend(self, q, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        q, tokens_per_seq = self._draft_extend_query(q.to(self.data_type), layer, bs)
        raw_out = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class KwargsLaunchTRTLLMMLABackend(_DcpDecodeHelpers, TRTLLMMLABackend):
    """Builds the flashinfer call as a kwargs dict (shared with the autotuner)."""

    def _base_kernel_kwargs(self, query, kv_cache, metadata, layer):
        return dict(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel
    # expect: SG203
    def launch_decode(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = self._decode_metadata(forward_batch)
        kernel_kwargs = self._base_kernel_kwargs(query, kv_cache, metadata, layer)
        kernel_kwargs["seq_lens"] = forward_batch.seq_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            kernel_kwargs["return_lse"] = True
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel
    # expect: clean
    def launch_decode_hoisted(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = self._decode_metadata(forward_batch)
        kernel_kwargs = self._base_kernel_kwargs(query, kv_cache, metadata, layer)
        kernel_kwargs["seq_lens"] = metadata.seq_lens_k[: forward_batch.batch_size]
        if get_parallel().dcp_enabled:
            kernel_kwargs["return_lse"] = True
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)


class FastPathTRTLLMMLABackend(_DcpDecodeHelpers, TRTLLMMLABackend):
    def __init__(self, *args, single_token_fast_path: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self._single_token_fast_path = single_token_fast_path

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode
    # expect: SG203
    def decode_attention(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = self._decode_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode() and self._single_token_fast_path:
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=forward_batch.seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=get_parallel().dcp_enabled,
            )
        if get_parallel().dcp_enabled:
            local = self._get_dcp_local_seq_lens(forward_batch.seq_lens)
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=local,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return self._finish_dcp(raw_out, lse, local, layer, forward_batch.batch_size)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode
    # expect: clean
    def decode_attention_v2(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = self._decode_metadata(forward_batch)
        if not get_parallel().dcp_enabled:
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=forward_batch.seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
        local = self._get_dcp_local_seq_lens(forward_batch.seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, local, layer, forward_batch.batch_size)


class CuteVerifyTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm_mla deployment that routes DCP target-verify to cute-dsl."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cute_workspace = torch.zeros(
            150 * 1024 * 1024, dtype=torch.uint8, device=self.device
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
    # expect: SG203
    def verify_dcp(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self._cute_workspace,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.global_seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=metadata.seq_lens_k,
            return_lse=True,
        )
        return raw_out, lse

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
    # expect: clean
    def verify_dcp_cute(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self._cute_workspace,
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
            causal_seqlens_kv_global=metadata.global_seq_lens_k,
            return_lse=True,
        )
        return raw_out, lse
