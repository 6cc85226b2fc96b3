"""cute-dsl MLA decode variants (the only FlashInfer MLA kernel with in-kernel DCP).

The cute-dsl monolithic kernel takes ``enable_dcp`` / ``cp_world`` /
``cp_rank`` / ``causal_seqlens_kv_global`` and returns the rank-local
``(out, lse)`` that the model merges across the DCP group.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run

from blindsg29.accel import dcp_utils
from blindsg29.accel.trtllm_gen_mla import MlaDecodeHelpersMixin

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


class VendorCuteDslMLABackend(MlaDecodeHelpersMixin, CuteDslMLABackend):
    def _draft_extend_layout(self, forward_batch: "ForwardBatch"):
        extend_lens = forward_batch.extend_seq_lens
        cu_q = torch.nn.functional.pad(
            torch.cumsum(extend_lens, dim=0, dtype=torch.int32), (1, 0)
        )
        return cu_q, max(forward_batch.extend_seq_lens_cpu)

    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode DCP branch: hoisted rank-local seq_lens_k as seq_lens, global_seq_lens_k as the causal bound
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
        info = dcp_utils.dcp_rank_info()
        if not info.enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.unsqueeze(1) if query.dim() == 3 else query
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_lens = metadata.seq_lens_k[:bs]
            global_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_lens = forward_batch.seq_lens[:bs]
            local_lens = self._get_dcp_local_seq_lens(global_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=info.size,
            cp_rank=info.rank,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, local_lens, bs)


class GlobalBoundCuteDslMLABackend(VendorCuteDslMLABackend):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode through dcp_utils.launch_mla_decode_dcp, one length tensor used for both kernel arguments
    # expect: SG203
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
        if not dcp_utils.dcp_rank_info().enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.unsqueeze(1) if query.dim() == 3 else query
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        # The kernel places every rank's share from the global bound itself.
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = dcp_utils.launch_mla_decode_dcp(
            query,
            kv_cache,
            self.workspace_buffer,
            metadata.block_kv_indices,
            kv_lens,
            kv_lens,
            metadata.max_seq_len_k,
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return self._finish_dcp(raw_out, lse, layer, metadata.seq_lens_k[:bs], bs)


class SwappedLensCuteDslMLABackend(VendorCuteDslMLABackend):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend._run_decode_kernel call with the hoisted metadata pair read field-by-field
    # expect: SG203
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
        info = dcp_utils.dcp_rank_info()
        if not info.enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.unsqueeze(1) if query.dim() == 3 else query
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kernel_lens = metadata.global_seq_lens_k[:bs]
        bound = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=bound,
            cp_world=info.size,
            cp_rank=info.rank,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, bound, bs)


class TupleLensCuteDslMLABackend(VendorCuteDslMLABackend):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode with the lengths carried as a dcp_utils.DcpLens NamedTuple (local / global_)
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
        info = dcp_utils.dcp_rank_info()
        if not info.enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.unsqueeze(1) if query.dim() == 3 else query
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        lens = dcp_utils.split_dcp_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = dcp_utils.launch_mla_decode_dcp(
            query,
            kv_cache,
            self.workspace_buffer,
            metadata.block_kv_indices,
            lens.local,
            lens.global_,
            dcp_utils.local_max_seq_len(self.max_context_len),
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return self._finish_dcp(raw_out, lse, layer, lens.local, bs)


class VerifyCuteDslMLABackend(VendorCuteDslMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend DCP target-verify branch on cute-dsl: rank-local seq_lens_k plus causal_seqs=global_seq_lens_k
    # expect: clean
    def forward_extend(
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
        info = dcp_utils.dcp_rank_info()
        if not (forward_batch.forward_mode.is_target_verify() and info.enabled):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = query.view(bs, ndt, layer.tp_q_head_num, layer.head_dim).to(self.data_type)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=info.size,
            cp_rank=info.rank,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, metadata.seq_lens_k, bs, q_len=ndt)


class DraftExtendCuteDslMLABackend(VendorCuteDslMLABackend):
    # idiom: trtllm_mla_backend draft-extend (NOTE draft_extend seq_len handling) on cute-dsl with a compact var-q query and the post-write KV lengths
    # expect: SG203
    def forward_extend(
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
        info = dcp_utils.dcp_rank_info()
        if not (forward_batch.forward_mode.is_draft_extend_v2() and info.enabled):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        cu_q, max_q = self._draft_extend_layout(forward_batch)
        kv_end = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = dcp_utils.launch_mla_decode_dcp(
            query.to(self.data_type),
            kv_cache,
            self.workspace_buffer,
            metadata.block_kv_indices,
            kv_end,
            kv_end,
            metadata.max_seq_len_k + max_q,
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cum_seq_lens_q=cu_q,
            max_q_len=max_q,
        )
        return raw_out.flatten(1), lse


class DraftExtendLocalCuteDslMLABackend(VendorCuteDslMLABackend):
    # idiom: trtllm_mla_backend draft-extend on cute-dsl with compact var-q, lengths localized via dcp_utils.local_kv_lens and the global post-write lengths as causal bound
    # expect: clean
    def forward_extend(
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
        info = dcp_utils.dcp_rank_info()
        if not (forward_batch.forward_mode.is_draft_extend_v2() and info.enabled):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        cu_q, max_q = self._draft_extend_layout(forward_batch)
        kv_end = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_local = dcp_utils.local_kv_lens(kv_end)
        raw_out, lse = dcp_utils.launch_mla_decode_dcp(
            query.to(self.data_type),
            kv_cache,
            self.workspace_buffer,
            metadata.block_kv_indices,
            kv_local,
            kv_end,
            metadata.max_seq_len_k + max_q,
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cum_seq_lens_q=cu_q,
            max_q_len=max_q,
        )
        return raw_out.flatten(1), lse


class DenseDraftExtendCuteDslMLABackend(VendorCuteDslMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend draft-extend can_direct_view path (dense [bs, tokens] query) with DCP-localized lengths
    # expect: SG203
    def forward_extend(
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
        mode = forward_batch.forward_mode
        if not mode.is_draft_extend_v2():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = query.shape[0] // bs
        query = query.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        dcp = dcp_utils.dcp_rank_info().enabled
        kv_lens = metadata.seq_lens_k
        raw = dcp_utils.launch_mla_decode(
            query.to(self.data_type),
            kv_cache,
            self.workspace_buffer,
            metadata.block_kv_indices,
            kv_lens,
            metadata.max_seq_len_k + tokens_per_seq,
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend=self.backend,
            return_lse=dcp,
        )
        if not dcp:
            return raw.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = raw
        return self._finish_dcp(raw_out, lse, layer, kv_lens, bs, q_len=tokens_per_seq)
