"""TRT-LLM MLA backends of the kernel team (trtllm-gen decode kernel, DCP)."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

from blindsg27.config import DcpKernelConfig
from blindsg27.mla import kernels
from blindsg27.mla.common import DcpMLAMixin
from blindsg27.mla.metadata import DcpLaunchArgs


class _ForkTRTLLMMLABackend(DcpMLAMixin, TRTLLMMLABackend):
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None, backend="trtllm-gen"):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf, backend=backend)
        self.dcp_cfg = DcpKernelConfig()
        assert self.data_type == torch.bfloat16, "fork DCP MLA backends keep a bf16 KV cache"


class GlobalLensTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_decode (0.5.18: the DCP decode launched with forward_batch.seq_lens)
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        kv_cache = self._kv_cache_view(layer)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
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
        return self._finish_dcp(raw_out, lse, seq_lens, layer, bs)


class RankLocalTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp (0.5.23: _get_dcp_local_seq_lens before the launch)
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        kv_cache = self._kv_cache_view(layer)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
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
        return self._finish_dcp(raw_out, lse, local_seq_lens, layer, bs)

    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel (0.5.23: refuse DCP target-verify / draft-extend on trtllm-gen)
    # expect: clean
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        mode = forward_batch.forward_mode
        if get_parallel().dcp_enabled and (mode.is_target_verify() or mode.is_draft_extend_v2()):
            raise NotImplementedError(
                "RankLocalTRTLLMMLABackend: trtllm-gen takes no global causal bound; "
                "a DCP speculative run needs the cute-dsl backend"
            )
        return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)


class SwappedLensTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp reading metadata.global_seq_lens_k instead of seq_lens_k
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        kv_cache = self._kv_cache_view(layer)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class HoistedTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp (hoisted seq_lens_k, but the fallback path keeps forward_batch.seq_lens)
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        kv_cache = self._kv_cache_view(layer)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
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


class HoistedTRTLLMMLABackendV2(_ForkTRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp (hoisted seq_lens_k; fallback localized with _get_dcp_local_seq_lens)
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        kv_cache = self._kv_cache_view(layer)
        metadata = self._decode_metadata(forward_batch)
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
        return self._finish_dcp(raw_out, lse, local_seq_lens, layer, bs)


class StrictTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel (0.5.23 refusal of q_len > 1 / causal_seqs / no LSE under DCP) via the kernels helper
    # expect: clean
    def _run_decode_kernel(self, query, kv_cache, block_tables, seq_lens, max_seq_len, layer, *, causal_seqs=None, cp_world=1, cp_rank=0, return_lse=False):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and (q_len > 1 or causal_seqs is not None or not return_lse):
            raise NotImplementedError(
                "trtllm-gen has no global causal bound: DCP serves plain decode only"
            )
        return kernels.launch_trtllm_mla_decode(
            self,
            query,
            kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=return_lse,
        )


class MtpTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel with the DCP refusal replaced by a trtllm-gen multi-token launch (causal_seqs dropped)
    # expect: SG203
    def _run_decode_kernel(self, query, kv_cache, block_tables, seq_lens, max_seq_len, layer, *, causal_seqs=None, cp_world=1, cp_rank=0, return_lse=False):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and q_len > 1:
            # MTP verify on trtllm-gen: the tree mask already hides unaccepted
            # drafts, so the rank-local lengths are all the kernel needs.
            return kernels.launch_trtllm_mla_decode(
                self,
                query,
                kv_cache,
                block_tables=block_tables,
                seq_lens=seq_lens,
                max_seq_len=max_seq_len,
                layer=layer,
                return_lse=True,
            )
        return super()._run_decode_kernel(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            layer,
            causal_seqs=causal_seqs,
            cp_world=cp_world,
            cp_rank=cp_rank,
            return_lse=return_lse,
        )


class ChunkedTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: layers/attention/dsa/dsa_dcp.dcp_trtllm_sparse_attention (row chunks of the DCP decode, sliced from forward_batch.seq_lens)
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        kv_cache = self._kv_cache_view(layer)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        step = self.dcp_cfg.rows_per_call or bs
        seq_lens = forward_batch.seq_lens[:bs]
        outs, lses = [], []
        for start in range(0, bs, step):
            end = min(start + step, bs)
            out, lse = self._run_decode_kernel(
                query=query[start:end],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[start:end],
                seq_lens=seq_lens[start:end],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        raw_out = outs[0] if len(outs) == 1 else torch.cat(outs)
        lse = lses[0] if len(lses) == 1 else torch.cat(lses)
        return self._finish_dcp(raw_out, lse, self._get_dcp_local_seq_lens(seq_lens), layer, bs)


class ChunkedTRTLLMMLABackendFixed(_ForkTRTLLMMLABackend):
    # idiom: layers/attention/dsa/dsa_dcp.dcp_trtllm_sparse_attention (row chunks over rank-local lengths)
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        kv_cache = self._kv_cache_view(layer)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        step = self.dcp_cfg.rows_per_call or bs
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        outs, lses = [], []
        for start in range(0, bs, step):
            end = min(start + step, bs)
            out, lse = self._run_decode_kernel(
                query=query[start:end],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[start:end],
                seq_lens=local_seq_lens[start:end],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        raw_out = torch.cat(outs) if len(outs) > 1 else outs[0]
        lse = torch.cat(lses) if len(lses) > 1 else lses[0]
        return self._finish_dcp(raw_out, lse, local_seq_lens, layer, bs)


class PagedGateTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: dcp.layout.get_dcp_lens applied only for page_size == 1 (bug on the paged path: forward_batch.seq_lens reaches the launch)
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        kv_cache = self._kv_cache_view(layer)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        if parallel.dcp_enabled and self.page_size == 1:
            kv_lens = get_dcp_lens(kv_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=parallel.dcp_enabled,
        )
        if parallel.dcp_enabled:
            out, lse = raw_out
            return self._finish_dcp(out, lse, kv_lens, layer, bs)
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class KernelHelperTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend._run_decode_kernel through kernels.launch_trtllm_mla_decode (seq_lens and causal bound both forward_batch.seq_lens)
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = kernels.launch_trtllm_mla_decode(
            self,
            query,
            self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=global_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            dcp=DcpLaunchArgs.current(causal_seqlens_kv_global=global_lens),
        )
        return self._finish_dcp(raw_out, lse, kernels.local_lens(global_lens), layer, bs)


class KernelHelperTRTLLMMLABackendFixed(_ForkTRTLLMMLABackend):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend._run_decode_kernel through kernels.launch_trtllm_mla_decode (local seq_lens, global causal bound)
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs]
        local = kernels.local_lens(global_lens)
        raw_out, lse = kernels.launch_trtllm_mla_decode(
            self,
            query,
            self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            dcp=DcpLaunchArgs.current(causal_seqlens_kv_global=global_lens),
        )
        return self._finish_dcp(raw_out, lse, local, layer, bs)


class VerifyTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend target verify under DCP (rank-local seq_lens_k, multi-token query, no causal_seqlens_kv_global)
    # expect: SG203
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not (forward_batch.forward_mode.is_target_verify() and get_parallel().dcp_enabled):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._prepare_spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs)
        metadata = self._decode_metadata(forward_batch)
        raw_out, lse = kernels.launch_trtllm_mla_decode(
            self,
            query,
            self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, metadata.seq_lens_k, layer, bs, draft_token_num)


class FallbackLensTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp with the lengths from kernels.decode_lens_for (its fallback returns forward_batch.seq_lens)
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = kernels.decode_lens_for(metadata, forward_batch, bs)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, seq_lens, layer, bs)


class ResolvedLensTRTLLMMLABackend(_ForkTRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp with the lengths from kernels.resolve_launch_lens (always rank-local)
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        local_seq_lens, _global_seq_lens = kernels.resolve_launch_lens(metadata, forward_batch, bs)
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
