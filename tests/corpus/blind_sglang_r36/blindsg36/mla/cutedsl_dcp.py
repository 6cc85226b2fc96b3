"""cute-dsl MLA (flashinfer trtllm_batch_decode_with_kv_cache_mla, backend
"cute-dsl") with DCP: decode, target verify and draft extend launches."""

from __future__ import annotations

from typing import Any, Dict, Optional

import flashinfer
import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from .lens import MLA_CFG, dcp_world, split_lens


def _verify_query(q: torch.Tensor, bs: int, layer: RadixAttention) -> torch.Tensor:
    return q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)


class LabCuteDslVerify(CuteDslMLABackend):
    """Target-verify launches written against flashinfer directly."""

    def _base_kwargs(self, query, kv_cache, block_tables, max_seq_len, layer) -> Dict[str, Any]:
        return dict(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
            return_lse=True,
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (target verify, q_len > 1)
    # expect: SG203
    def verify_launch_dcp_v2(self, q, kv_cache, metadata: TRTLLMMLADecodeMetadata,
                          layer: RadixAttention, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        dcp_size, dcp_rank = dcp_world()
        glob, local = split_lens(forward_batch.seq_lens[:bs], draft_token_num)
        query = _verify_query(q, bs, layer)
        kwargs = self._base_kwargs(query, kv_cache, metadata.block_kv_indices,
                                   metadata.max_seq_len_k, layer)
        kwargs["seq_lens"] = local
        if dcp_size > 1 and query.shape[1] == 1:
            # Single-token rows need the cyclic metadata for the merge; the
            # verify rows are masked causally by the kernel itself.
            kwargs.update(enable_dcp=True, cp_world=dcp_size, cp_rank=dcp_rank,
                          causal_seqlens_kv_global=glob)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)
        out = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(out, lse, local, self._dense_q_indptr(bs, draft_token_num),
                           draft_token_num)
        return out.flatten(1), lse

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (target verify, q_len > 1)
    # expect: clean
    def verify_launch_dcp(self, q, kv_cache, metadata: TRTLLMMLADecodeMetadata,
                                  layer: RadixAttention, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        dcp_size, dcp_rank = dcp_world()
        glob, local = split_lens(forward_batch.seq_lens[:bs], draft_token_num)
        query = _verify_query(q, bs, layer)
        kwargs = self._base_kwargs(query, kv_cache, metadata.block_kv_indices,
                                   metadata.max_seq_len_k, layer)
        kwargs["seq_lens"] = local
        if dcp_size > 1:
            kwargs.update(enable_dcp=True, cp_world=dcp_size, cp_rank=dcp_rank,
                          causal_seqlens_kv_global=glob)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)
        out = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(out, lse, local, self._dense_q_indptr(bs, draft_token_num),
                           draft_token_num)
        return out.flatten(1), lse

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (DCP branch)
    # expect: SG203
    def verify_launch_positional(self, q, kv_cache, metadata: TRTLLMMLADecodeMetadata,
                              layer: RadixAttention, forward_batch: ForwardBatch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        glob = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        local = get_dcp_lens(glob, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            _verify_query(q, bs, layer),
            kv_cache,
            metadata.block_kv_indices,
            glob,
            metadata.max_seq_len_k,
            layer,
            causal_seqs=local,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out.view(bs * ndt, -1), lse.view(bs * ndt, -1)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (DCP branch)
    # expect: clean
    def verify_launch_kwargs(self, q, kv_cache, metadata: TRTLLMMLADecodeMetadata,
                            layer: RadixAttention, forward_batch: ForwardBatch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        glob = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        local = get_dcp_lens(glob, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)
        launch = {
            "seq_lens": local,
            "causal_seqs": glob,
            "cp_world": parallel.dcp_size,
            "cp_rank": parallel.dcp_rank,
        }
        raw_out, lse = self._run_decode_kernel(
            query=_verify_query(q, bs, layer),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
            **launch,
        )
        return raw_out.view(bs * ndt, -1), lse.view(bs * ndt, -1)


class LabCuteDslDecode(CuteDslMLABackend):
    """Decode tail of CuteDslMLABackend.forward_decode, after query prep."""

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted vs fallback lens)
    # expect: SG203
    def dcp_decode_tail(self, query, kv_cache, layer: RadixAttention, forward_batch: ForwardBatch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        if (
            isinstance(metadata, TRTLLMMLADecodeMetadata)
            and metadata.global_seq_lens_k is not None
            and getattr(metadata, "batch_size", None) == bs
        ):
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            # DP padding grew the batch past the hoisted metadata (or it is
            # a plain FlashInfer metadata object): read the live lengths.
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = global_seq_lens
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted vs fallback lens)
    # expect: clean
    def dcp_decode_tail_v2(self, query, kv_cache, layer: RadixAttention,
                              forward_batch: ForwardBatch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        if (
            isinstance(metadata, TRTLLMMLADecodeMetadata)
            and metadata.global_seq_lens_k is not None
            and getattr(metadata, "batch_size", None) == bs
        ):
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class LabCuteDslDraftExtend(CuteDslMLABackend):
    """Draft-extend (DRAFT_EXTEND_V2) launches, padded to [bs, max_q, H, D]."""

    def _padded_q(self, q, forward_batch: ForwardBatch, layer: RadixAttention):
        bs = forward_batch.batch_size
        max_q = max(forward_batch.extend_seq_lens_cpu)
        cu_q = torch.nn.functional.pad(
            torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32), (1, 0)
        )
        padded = torch.zeros((bs, max_q, layer.tp_q_head_num, layer.head_dim),
                             dtype=q.dtype, device=q.device)
        q = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        return self.pad_draft_extend_query(q, padded, forward_batch.extend_seq_lens, cu_q), max_q, cu_q

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend branch)
    # expect: SG203
    def draft_extend_launch_v2(self, q, kv_cache, layer: RadixAttention, forward_batch: ForwardBatch):
        metadata = forward_batch.decode_trtllm_mla_metadata
        padded_q, max_q, cu_q = self._padded_q(q, forward_batch, layer)
        local = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k
                                             if metadata.global_seq_lens_k is not None
                                             else metadata.seq_lens_k)
        # trtllm-gen handles variable q rows with its own causal mask.
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=padded_q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k + max_q,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="trtllm-gen",
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return self.unpad_draft_extend_output(
            raw_out, cu_q, forward_batch.extend_seq_lens, q.shape[0], zero_uncovered=False
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend branch)
    # expect: clean
    def draft_extend_launch(self, q, kv_cache, layer: RadixAttention,
                                     forward_batch: ForwardBatch):
        metadata = forward_batch.decode_trtllm_mla_metadata
        padded_q, max_q, cu_q = self._padded_q(q, forward_batch, layer)
        # The trtllm-gen hook raises NotImplementedError for q_len > 1 under
        # DCP (no global causal bound), so DCP draft extend is refused there.
        raw_out = TRTLLMMLABackend._run_decode_kernel(
            self,
            query=padded_q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + max_q,
            layer=layer,
        )
        return self.unpad_draft_extend_output(
            raw_out, cu_q, forward_batch.extend_seq_lens, q.shape[0], zero_uncovered=False
        )
