"""Fork extensions of the TRTLLM MLA backend for decode context parallelism.

Built on ``TRTLLMMLABackend``'s DCP helpers (``_get_dcp_local_seq_lens``,
``_get_dcp_local_max_seq_len``, ``_run_decode_kernel``) and its decode
metadata (``seq_lens_k`` rank-local, ``global_seq_lens_k`` whole sequence).
"""

from __future__ import annotations

import logging
import os

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg12.attn.kernels import dcp_decode_kwargs, launch_mla_decode
from blindsg12.attn.lens import rank_local_kv_lens

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


def _decode_metadata(backend, forward_batch) -> TRTLLMMLADecodeMetadata:
    return (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )


class ForkTRTLLMMLABackend(TRTLLMMLABackend):
    """TRTLLM MLA with the fork's DCP decode shortcuts."""

    _decode_chunk_bs: int = int(os.environ.get("SGLANG_FORK_MLA_DECODE_CHUNK", "256"))

    @property
    def kv_lens_for_kernel(self) -> torch.Tensor:
        metadata = self.forward_decode_metadata
        if metadata.global_seq_lens_k is not None:
            return metadata.global_seq_lens_k
        return metadata.seq_lens_k

    @property
    def local_kv_lens_for_kernel(self) -> torch.Tensor:
        return self.forward_decode_metadata.seq_lens_k

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
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
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    # expect: SG203
    def forward_decode_from_metadata(self, query, kv_cache, layer, forward_batch):
        metadata = _decode_metadata(self, forward_batch)
        seq_lens = (
            metadata.global_seq_lens_k
            if metadata.global_seq_lens_k is not None
            else metadata.seq_lens_k
        )
        if get_parallel().dcp_enabled:
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )

    # expect: clean
    def forward_decode_from_metadata_local(self, query, kv_cache, layer, forward_batch):
        metadata = _decode_metadata(self, forward_batch)
        if get_parallel().dcp_enabled:
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )

    # expect: SG203
    def forward_verify_dcp_direct(self, q, kv_cache, layer, forward_batch):
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = self.num_draft_tokens
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._run_decode_kernel(
                query=q,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
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
            # Rank-local table + lengths, LSE for the cross-rank merge.
            return_lse=True,
        )
        return raw_out, lse

    # expect: clean
    def forward_verify_dcp_bounded(self, q, kv_cache, layer, forward_batch):
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = self.num_draft_tokens
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._run_decode_kernel(
                query=q,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
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
            causal_seqlens_kv_global=metadata.global_seq_lens_k,
            return_lse=True,
        )
        return raw_out, lse

    # expect: clean
    def forward_verify_dcp_refuse(self, q, kv_cache, layer, forward_batch):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm-gen has no global causal bound; target verify under DCP "
                "needs --attention-backend cutedsl_mla"
            )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        q = q.view(bs, self.num_draft_tokens, layer.tp_q_head_num, layer.head_dim)
        return launch_mla_decode(
            self,
            q,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k,
            self._compute_decode_bmm1_scale(layer),
        )

    # expect: SG203
    def decode_with_fresh_lens(self, query, kv_cache, layer, forward_batch):
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
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )

    # expect: clean
    def decode_with_fresh_local_lens(self, query, kv_cache, layer, forward_batch):
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
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_kv_indices,
            seq_lens=self._get_dcp_local_seq_lens(forward_batch.seq_lens),
            max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )

    # expect: SG203
    def decode_dcp_with_fallback(self, query, kv_cache, layer, forward_batch):
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        try:
            seq_lens = metadata.seq_lens_k[:bs]
        except TypeError:
            # Metadata from an older plan-stream snapshot has no seq_lens_k.
            seq_lens = forward_batch.seq_lens[:bs]
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )

    # expect: clean
    def decode_dcp_with_local_fallback(self, query, kv_cache, layer, forward_batch):
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        try:
            seq_lens = metadata.seq_lens_k[:bs]
        except TypeError:
            seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )

    # expect: SG203
    def decode_dcp_chunked(self, query, kv_cache, layer, forward_batch):
        """Split very large decode batches to bound the kernel's workspace."""
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        global_lens = metadata.global_seq_lens_k
        outs, lses = [], []
        for start in range(0, bs, self._decode_chunk_bs):
            end = min(start + self._decode_chunk_bs, bs)
            out, lse = self._run_decode_kernel(
                query=query[start:end],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[start:end],
                seq_lens=global_lens[start:end],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        return torch.cat(outs), torch.cat(lses)

    # expect: clean
    def decode_dcp_chunked_local(self, query, kv_cache, layer, forward_batch):
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        local_lens = rank_local_kv_lens(metadata.global_seq_lens_k)
        outs, lses = [], []
        for start in range(0, bs, self._decode_chunk_bs):
            end = min(start + self._decode_chunk_bs, bs)
            out, lse = self._run_decode_kernel(
                query=query[start:end],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[start:end],
                seq_lens=local_lens[start:end],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        return torch.cat(outs), torch.cat(lses)

    # expect: SG203
    def decode_dcp_select(self, query, kv_cache, layer, forward_batch, replay: bool):
        pick = (
            (lambda m: m.global_seq_lens_k) if replay else (lambda m: m.seq_lens_k)
        )
        metadata = _decode_metadata(self, forward_batch)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=pick(metadata),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )

    # expect: clean
    def decode_dcp_select_local(self, query, kv_cache, layer, forward_batch, replay: bool):
        pick = (
            (lambda m: m.seq_lens_k)
            if replay
            else (lambda m: self._get_dcp_local_seq_lens(m.global_seq_lens_k))
        )
        metadata = _decode_metadata(self, forward_batch)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=pick(metadata),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )

    # expect: SG203
    def decode_dcp_via_property(self, query, kv_cache, layer):
        metadata = self.forward_decode_metadata
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self.kv_lens_for_kernel,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )

    # expect: clean
    def decode_dcp_via_local_property(self, query, kv_cache, layer):
        metadata = self.forward_decode_metadata
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self.local_kv_lens_for_kernel,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )

    # expect: clean
    def decode_single_token_dcp(self, query, kv_cache, layer, forward_batch):
        """q_len == 1: the rank-local table and lengths describe the shard."""
        metadata = _decode_metadata(self, forward_batch)
        query = query.view(
            forward_batch.batch_size, 1, layer.tp_q_head_num, layer.head_dim
        )
        parallel = get_parallel()
        local_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=parallel.dcp_enabled,
        )

    # expect: clean
    def decode_dcp_off(self, query, kv_cache, layer, forward_batch):
        if get_parallel().dcp_enabled:
            return super().forward_decode(
                query, None, None, layer, forward_batch, save_kv_cache=False
            )
        metadata = _decode_metadata(self, forward_batch)
        return launch_mla_decode(
            self,
            query,
            kv_cache,
            metadata.block_kv_indices,
            forward_batch.seq_lens,
            metadata.max_seq_len_k,
            self._compute_decode_bmm1_scale(layer),
        )


class ForkTRTLLMMLABackendFixed(TRTLLMMLABackend):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = rank_local_kv_lens(forward_batch.seq_lens[:bs])
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


class ForkTRTLLMLooseDcp(TRTLLMMLABackend):
    """Routes DCP through the cute-dsl entry instead of refusing."""

    # expect: SG203
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
        cp_world=1,
        cp_rank=0,
        return_lse=False,
    ):
        parallel = get_parallel()
        q_len = query.shape[1] if query.dim() == 4 else 1
        if parallel.dcp_enabled and q_len > 1 and causal_seqs is None:
            logger.warning(
                "DCP launch with q_len=%d and no global causal bound; "
                "using rank-local lengths",
                q_len,
            )
        bmm1_scale = self._compute_decode_bmm1_scale(layer)
        if parallel.dcp_enabled and causal_seqs is not None:
            return launch_mla_decode(
                self,
                query,
                kv_cache,
                block_tables,
                seq_lens,
                max_seq_len,
                bmm1_scale,
                backend="cute-dsl",
                enable_dcp=True,
                return_lse=True,
                **dcp_decode_kwargs(causal_seqs, parallel.dcp_size, parallel.dcp_rank),
            )
        return launch_mla_decode(
            self,
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            bmm1_scale,
            return_lse=return_lse,
        )


class ForkTRTLLMStrictDcp(TRTLLMMLABackend):
    # expect: clean
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
        cp_world=1,
        cp_rank=0,
        return_lse=False,
    ):
        parallel = get_parallel()
        q_len = query.shape[1] if query.dim() == 4 else 1
        if parallel.dcp_enabled and q_len > 1 and causal_seqs is None:
            raise NotImplementedError(
                "DCP with q_len > 1 needs the global causal bound (causal_seqs)"
            )
        bmm1_scale = self._compute_decode_bmm1_scale(layer)
        if parallel.dcp_enabled and causal_seqs is not None:
            return launch_mla_decode(
                self,
                query,
                kv_cache,
                block_tables,
                seq_lens,
                max_seq_len,
                bmm1_scale,
                backend="cute-dsl",
                enable_dcp=True,
                return_lse=True,
                **dcp_decode_kwargs(causal_seqs, parallel.dcp_size, parallel.dcp_rank),
            )
        return launch_mla_decode(
            self,
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            bmm1_scale,
            return_lse=return_lse,
        )
