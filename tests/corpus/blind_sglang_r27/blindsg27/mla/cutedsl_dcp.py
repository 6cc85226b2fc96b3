"""cute-dsl MLA backends of the kernel team (FlashInfer cute-dsl DCP decode)."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import (
    CuteDslMLABackend,
    CuteDslMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

from blindsg27.config import DcpKernelConfig
from blindsg27.mla import kernels
from blindsg27.mla.common import DcpMLAMixin
from blindsg27.mla.metadata import DcpDecodeMetadata, DcpLaunchArgs


class _ForkCuteDslMLABackend(DcpMLAMixin, CuteDslMLABackend):
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        self.dcp_cfg = DcpKernelConfig()
        self.draft_step = 0

    def _dcp_kernel(self, query, kv_cache, block_tables, seq_lens, causal_seqs, max_seq_len, layer):
        parallel = get_parallel()
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            causal_seqs=causal_seqs,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )


class GlobalCausalCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode (hoisted rank-local seq_lens_k + global_seq_lens_k as causal_seqs)
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), metadata.block_kv_indices,
            local_seq_lens, global_seq_lens, metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, local_seq_lens, layer, bs)


class SwappedCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend DCP target verify (seq_lens and causal_seqs swapped: global_seq_lens_k as seq_lens)
    # expect: SG203
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not (forward_batch.forward_mode.is_target_verify() and get_parallel().dcp_enabled):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._prepare_spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs)
        metadata = self._decode_metadata(forward_batch)
        raw_out, lse = self._dcp_kernel(
            query,
            self._kv_cache_view(layer),
            metadata.block_kv_indices,
            metadata.global_seq_lens_k,
            metadata.seq_lens_k,
            metadata.max_seq_len_k,
            layer,
        )
        return self._finish_dcp(raw_out, lse, metadata.seq_lens_k, layer, bs, draft_token_num)


class VerifyCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend DCP target verify (seq_lens_k local, causal_seqs=global_seq_lens_k, cp_world/cp_rank)
    # expect: clean
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not (forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._prepare_spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs)
        metadata = self._decode_metadata(forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, metadata.seq_lens_k, layer, bs, draft_token_num)


class DraftExtendCuteDslMLABackend(_ForkCuteDslMLABackend):
    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        if get_parallel().dcp_enabled and forward_batch.forward_mode.is_draft_extend_v2():
            metadata = self.forward_decode_metadata
            # Draft extend pads every request's query to max_seq_len_q; the
            # kernel key length has to cover the padded rows (see
            # NOTE(draft_extend seq_len handling)), so keep the full length.
            metadata.seq_lens_k = metadata.global_seq_lens_k

    # idiom: cutedsl_mla_backend (0.5.18) draft extend under DCP: seq_lens_k left global by init_forward_metadata, read by the launch (bug on the eager-planned path)
    # expect: SG203
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not (forward_batch.forward_mode.is_draft_extend_v2() and get_parallel().dcp_enabled):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        bs = forward_batch.batch_size
        metadata = self._decode_metadata(forward_batch)
        query = self._prepare_spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs)
        q_len = query.shape[1]
        raw_out, lse = self._dcp_kernel(
            query,
            self._kv_cache_view(layer),
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.global_seq_lens_k,
            metadata.max_seq_len_k,
            layer,
        )
        return self._finish_dcp(raw_out, lse, self._get_dcp_local_seq_lens(metadata.global_seq_lens_k), layer, bs, q_len)


class DraftExtendCuteDslMLABackendFixed(_ForkCuteDslMLABackend):
    # idiom: cutedsl_mla_backend draft extend under DCP (uniform query width: local seq_lens_k + global causal bound; ragged widths refused)
    # expect: clean
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not (forward_batch.forward_mode.is_draft_extend_v2() and parallel.dcp_enabled):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        bs = forward_batch.batch_size
        total_tokens = q.shape[0]
        if bs == 0 or total_tokens % bs != 0:
            raise NotImplementedError("DCP draft extend needs a uniform query width per request")
        metadata = self._decode_metadata(forward_batch)
        query = self._prepare_spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs)
        global_seq_lens = metadata.global_seq_lens_k[:bs]
        local_seq_lens = get_dcp_lens(global_seq_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, local_seq_lens, layer, bs, total_tokens // bs)


class PropertyCuteDslMLABackend(_ForkCuteDslMLABackend):
    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        self._kv_lens = forward_batch.seq_lens.to(torch.int32)

    @property
    def kv_lens(self) -> torch.Tensor:
        return self._kv_lens

    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode with lengths stored by init_forward_metadata and read through a property (the whole sequence)
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = self.kv_lens[:bs]
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), metadata.block_kv_indices,
            kv_lens, kv_lens, metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class PropertyCuteDslMLABackendFixed(_ForkCuteDslMLABackend):
    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        self._kv_lens = forward_batch.seq_lens.to(torch.int32)

    @property
    def kv_lens(self) -> torch.Tensor:
        return self._kv_lens

    @property
    def local_kv_lens(self) -> torch.Tensor:
        parallel = get_parallel()
        return get_dcp_lens(self._kv_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)

    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode with lengths from properties (get_dcp_lens local share, global as causal bound)
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        local_kv_lens = self.local_kv_lens[:bs]
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), metadata.block_kv_indices,
            local_kv_lens, self.kv_lens[:bs], metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, local_kv_lens, layer, bs)


class ComputedLensCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend DCP target verify with kv lengths recomputed from forward_batch.seq_lens + draft tokens
    # expect: SG203
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not (forward_batch.forward_mode.is_target_verify() and get_parallel().dcp_enabled):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._prepare_spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs)
        metadata = self._decode_metadata(forward_batch)
        kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), metadata.block_kv_indices,
            kv_lens, kv_lens, metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, metadata.seq_lens_k, layer, bs, draft_token_num)


class UnpackedCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: dcp.layout.update_local_kv_lens_for_dcp called on a temporary copy (the in-place result is dropped; the launch gets the global lengths)
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_lens = global_lens
        update_local_kv_lens_for_dcp(kv_lens.clone())
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), metadata.block_kv_indices,
            kv_lens, global_lens, metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, kv_lens, layer, bs)


class InPlaceCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: dcp.layout.update_local_kv_lens_for_dcp (in place on a copy that is then launched; global kept for the causal bound)
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_lens = global_lens.clone()
        update_local_kv_lens_for_dcp(kv_lens)
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), metadata.block_kv_indices,
            kv_lens, global_lens, metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, kv_lens, layer, bs)


class SpecLensCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: trtllm_mla_backend.init_forward_metadata draft-extend lengths (seq_lens - extend_seq_lens + max_seq_len_q) recomputed in forward_extend and launched under DCP
    # expect: SG203
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not (forward_batch.forward_mode.is_draft_extend_v2() and get_parallel().dcp_enabled):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        bs = forward_batch.batch_size
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        if any(n != max_seq_len_q for n in forward_batch.extend_seq_lens_cpu):
            raise NotImplementedError("ragged DCP draft extend")
        query = self._prepare_spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs)
        metadata = self._decode_metadata(forward_batch)
        kv_lens = (
            forward_batch.seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
        ).to(torch.int32)
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), metadata.block_kv_indices,
            kv_lens, kv_lens, metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, self._get_dcp_local_seq_lens(kv_lens), layer, bs, max_seq_len_q)


class DraftStepCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: cutedsl_mla_backend.CuteDslMLAMultiStepDraftBackend step backend (bug on the draft-runner path: seq_lens + draft_step launched as seq_lens)
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        if self.is_draft_runner and self.draft_step > 0:
            # Step i attends the prefix plus the i tokens drafted so far.
            global_lens = (forward_batch.seq_lens[:bs] + self.draft_step).to(torch.int32)
            seq_lens = global_lens
        else:
            global_lens = metadata.global_seq_lens_k[:bs]
            seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), metadata.block_kv_indices,
            seq_lens, global_lens, metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, self._get_dcp_local_seq_lens(global_lens), layer, bs)


class DraftStepCuteDslMLABackendFixed(_ForkCuteDslMLABackend):
    # idiom: cutedsl_mla_backend.CuteDslMLAMultiStepDraftBackend step backend (draft-runner path localized with _get_dcp_local_seq_lens)
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        if self.is_draft_runner and self.draft_step > 0:
            global_lens = (forward_batch.seq_lens[:bs] + self.draft_step).to(torch.int32)
            seq_lens = self._get_dcp_local_seq_lens(global_lens)
        else:
            global_lens = metadata.global_seq_lens_k[:bs]
            seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), metadata.block_kv_indices,
            seq_lens, global_lens, metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, seq_lens, layer, bs)


class DcpCuteDslMultiStepDraftBackend(CuteDslMLAMultiStepDraftBackend):
    """Multi-step draft wrapper whose step backends know their step index."""

    def __init__(self, model_runner, topk: int, speculative_num_steps: int):
        super().__init__(model_runner, topk, speculative_num_steps)
        for i in range(self.speculative_num_steps - 1):
            step_backend = DraftStepCuteDslMLABackendFixed(
                model_runner,
                skip_prefill=True,
                kv_indptr_buf=self.kv_indptr[i],
                q_indptr_decode_buf=self.q_indptr_decode,
            )
            step_backend.draft_step = i
            self.attn_backends[i] = step_backend


class FlaggedVerifyCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend DCP target verify (bug only when dcp_cfg.tree_verify: launched without the global causal bound)
    # expect: SG203
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not (forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._prepare_spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs)
        metadata = self._decode_metadata(forward_batch)
        use_tree_path = self.dcp_cfg.tree_verify and forward_batch.spec_info.custom_mask is not None
        if use_tree_path:
            # Tree verify: the custom mask orders the drafts, run the plain
            # kernel on this rank's pages.
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
        else:
            raw_out, lse = self._dcp_kernel(
                query, self._kv_cache_view(layer), metadata.block_kv_indices,
                metadata.seq_lens_k, metadata.global_seq_lens_k, metadata.max_seq_len_k, layer,
            )
        return self._finish_dcp(raw_out, lse, metadata.seq_lens_k, layer, bs, draft_token_num)


class GraphMetaCuteDslMLABackend(_ForkCuteDslMLABackend):
    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None):
        super().init_cuda_graph_state(max_bs, max_num_tokens, kv_indices_buf)
        self._graph_lens = torch.zeros((max_bs,), dtype=torch.int32, device=self.device)
        self._replaying = False

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        bs = forward_batch.batch_size
        self._graph_lens[:bs].copy_(forward_batch.seq_lens[:bs])
        self._replaying = True

    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        metadata = self.forward_decode_metadata
        self._dcp_md = DcpDecodeMetadata(
            block_kv_indices=metadata.block_kv_indices,
            local_seq_lens=metadata.seq_lens_k,
            global_seq_lens=metadata.global_seq_lens_k,
            max_local_seq_len=metadata.max_seq_len_k,
            batch_size=forward_batch.batch_size,
        )
        self._replaying = False

    # idiom: trtllm_mla_backend._apply_dcp_cuda_graph_metadata + forward_decode (bug on the cuda-graph replay path: the capture-stable buffer holds the global lengths)
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        bs = forward_batch.batch_size
        if self._replaying:
            metadata = self.decode_cuda_graph_metadata[bs]
            seq_lens = self._graph_lens[:bs]
            global_lens = self._graph_lens[:bs]
            block_tables = metadata.block_kv_indices
            max_len = metadata.max_seq_len_k
        else:
            md = self._dcp_md
            seq_lens = md.local_seq_lens[:bs]
            global_lens = md.global_seq_lens[:bs]
            block_tables = md.block_kv_indices
            max_len = md.max_local_seq_len
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), block_tables, seq_lens, global_lens, max_len, layer
        )
        return self._finish_dcp(raw_out, lse, self._get_dcp_local_seq_lens(global_lens), layer, bs)


class GraphMetaCuteDslMLABackendFixed(GraphMetaCuteDslMLABackend):
    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None):
        super().init_cuda_graph_state(max_bs, max_num_tokens, kv_indices_buf)
        self._graph_local_lens = torch.zeros((max_bs,), dtype=torch.int32, device=self.device)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        bs = forward_batch.batch_size
        self._graph_local_lens[:bs].copy_(self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs]))

    # idiom: trtllm_mla_backend._apply_dcp_cuda_graph_metadata + forward_decode (replay path reads a rank-local capture-stable buffer)
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        bs = forward_batch.batch_size
        if self._replaying:
            metadata = self.decode_cuda_graph_metadata[bs]
            seq_lens = self._graph_local_lens[:bs]
            global_lens = self._graph_lens[:bs]
            block_tables = metadata.block_kv_indices
            max_len = metadata.max_seq_len_k
        else:
            md = self._dcp_md
            seq_lens = md.local_seq_lens[:bs]
            global_lens = md.global_seq_lens[:bs]
            block_tables = md.block_kv_indices
            max_len = md.max_local_seq_len
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), block_tables, seq_lens, global_lens, max_len, layer
        )
        return self._finish_dcp(raw_out, lse, seq_lens, layer, bs)


class VerifyHelperCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend DCP target verify through kernels.launch_trtllm_mla_decode (get_dcp_lens local, seq_lens + draft as causal bound)
    # expect: clean
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not (forward_batch.forward_mode.is_target_verify() and get_parallel().dcp_enabled):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._prepare_spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs)
        metadata = self._decode_metadata(forward_batch)
        global_kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        local_kv_lens = kernels.local_lens(global_kv_lens)
        raw_out, lse = kernels.launch_trtllm_mla_decode(
            self,
            query,
            self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            dcp=DcpLaunchArgs.current(causal_seqlens_kv_global=global_kv_lens),
        )
        return self._finish_dcp(raw_out, lse, local_kv_lens, layer, bs, draft_token_num)


class OwnInitCuteDslMLABackend(_ForkCuteDslMLABackend):
    """Eager-only: the fork metadata record is rebuilt per step, never captured."""

    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None):
        raise NotImplementedError("OwnInitCuteDslMLABackend runs without cuda graphs")

    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        self._dcp_md = DcpDecodeMetadata(
            block_kv_indices=self.forward_decode_metadata.block_kv_indices,
            local_seq_lens=(
                get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)
                if parallel.dcp_enabled
                else global_lens
            ),
            global_seq_lens=global_lens,
            max_local_seq_len=self.forward_decode_metadata.max_seq_len_k,
            batch_size=bs,
        )

    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode reading a fork metadata record localized in init_forward_metadata
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        md = self._dcp_md
        if md.batch_size < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            md = self._dcp_md
        query = self._prepare_decode_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling)
        bs = forward_batch.batch_size
        raw_out, lse = self._dcp_kernel(
            query, self._kv_cache_view(layer), md.block_kv_indices,
            md.local_seq_lens[:bs], md.global_seq_lens[:bs], md.max_local_seq_len, layer,
        )
        return self._finish_dcp(raw_out, lse, md.local_seq_lens[:bs], layer, bs)


class AssertingCuteDslMLABackend(_ForkCuteDslMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel refusal, written as an assert before the speculative launch
    # expect: clean
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        mode = forward_batch.forward_mode
        if not (mode.is_target_verify() or mode.is_draft_extend_v2()):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        assert not get_parallel().dcp_enabled, (
            "AssertingCuteDslMLABackend: speculative MLA under DCP is not supported"
        )
        bs = forward_batch.batch_size
        query = self._prepare_spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs)
        metadata = self._decode_metadata(forward_batch)
        q_len = query.shape[1]
        raw_out = kernels.launch_trtllm_mla_decode(
            self,
            query,
            self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + q_len,
            layer=layer,
        )
        return raw_out.reshape(-1, layer.tp_q_head_num * layer.v_head_dim)
