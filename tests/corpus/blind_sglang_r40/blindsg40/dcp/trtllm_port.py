"""DCP port of the TRT-LLM MLA backend.

Settings come from a frozen :class:`DcpSettings`; the rank-local helpers of
``TRTLLMMLABackend`` (``_get_dcp_local_seq_lens``, ``_fill_dcp_block_kv_indices``)
are reused. Under DCP, ``TRTLLMMLABackend.init_forward_metadata`` leaves the
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
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.utils import is_flashinfer_available

from blindsg40.config.settings import DcpSettings, SpecSettings
from blindsg40.registry.core import register_dcp_backend

if is_flashinfer_available():
    import flashinfer


class DcpTRTLLMMLABackend(TRTLLMMLABackend):
    def __init__(self, model_runner, dcp: DcpSettings, spec: SpecSettings, **kwargs):
        super().__init__(model_runner, **kwargs)
        self.dcp = dcp
        self.spec = spec
        self._current_seq_lens: Optional[torch.Tensor] = None

    @classmethod
    def from_server_args(cls, server_args, model_runner, **kwargs):
        return cls(
            model_runner,
            DcpSettings.from_server_args(server_args),
            SpecSettings.from_server_args(server_args),
            **kwargs,
        )

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._current_seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]

    @property
    def rank_seq_lens(self) -> torch.Tensor:
        return self._current_seq_lens.to(torch.int32)

    @property
    def rank_local_seq_lens(self) -> torch.Tensor:
        return self._get_dcp_local_seq_lens(self._current_seq_lens)

    def _finish(self, raw_out, lse, local_seq_lens, layer, bs):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # expect: clean
    def forward_decode_hoisted(self, query, kv_cache, layer, forward_batch):
        metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
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
        return self._finish(raw_out, lse, local_seq_lens, layer, bs)

    # expect: SG203
    def forward_decode_rank_local(self, query, kv_cache, layer, forward_batch):
        metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        local_seq_lens = self._get_dcp_local_seq_lens(metadata.seq_lens_k[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local_seq_lens, layer, bs)

    # expect: clean
    def forward_decode_from_global(self, query, kv_cache, layer, forward_batch):
        metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        local_seq_lens = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local_seq_lens, layer, bs)

    # expect: SG203
    def forward_decode_global_view(self, query, kv_cache, layer, forward_batch):
        metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
        saved = metadata.seq_lens_k
        try:
            # Present the un-sharded lengths to the shared decode body.
            metadata.seq_lens_k = metadata.global_seq_lens_k
            return super()._forward_decode_dcp(query, kv_cache, metadata, layer, forward_batch)
        finally:
            metadata.seq_lens_k = saved

    # expect: SG203
    def forward_decode_current(self, query, kv_cache, layer, forward_batch):
        metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self.rank_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)

    # expect: clean
    def forward_decode_current_local(self, query, kv_cache, layer, forward_batch):
        metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        local_seq_lens = self.rank_local_seq_lens
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local_seq_lens, layer, bs)

    # expect: clean
    def forward_decode_local_view(self, query, kv_cache, layer, forward_batch):
        metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        saved = metadata.seq_lens_k
        try:
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k[:bs])
            return super()._forward_decode_dcp(query, kv_cache, metadata, layer, forward_batch)
        finally:
            metadata.seq_lens_k = saved


class DcpTRTLLMMLABatchLensBackend(DcpTRTLLMMLABackend):
    """Reads the decode lengths straight off the batch."""

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
        return self._finish(raw_out, lse, seq_lens, layer, bs)


class DcpTRTLLMMLASpecBackend(DcpTRTLLMMLABackend):
    """Lets the target-verify / draft-extend kernel calls through under DCP."""

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
        if not self.dcp.enabled:
            return super()._run_decode_kernel(
                query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
                causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
                return_lse=return_lse,
            )
        # Rank-local shard: page table and seq_lens already describe it.
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query if query.dim() == 4 else query.unsqueeze(1),
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="trtllm-gen",
            return_lse=True,
        )


class DcpTRTLLMMLAGuardedBackend(DcpTRTLLMMLABackend):
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
        q_len = query.shape[1] if query.dim() == 4 else 1
        if self.dcp.enabled and (q_len > 1 or causal_seqs is not None):
            raise NotImplementedError(
                "trtllm-gen MLA has no global causal bound for a multi-token "
                "query under DCP; use the cutedsl_mla DCP port for speculative runs"
            )
        return super()._run_decode_kernel(
            query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
            causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
            return_lse=return_lse,
        )


class DcpTRTLLMMLAGraphBackend(DcpTRTLLMMLABackend):
    """Capture+replay metadata refresh, ported from the 0.5.18 cute-dsl body."""

    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(self, bs, req_pool_indices, seq_lens, forward_mode, metadata):
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(metadata.global_seq_lens_k))
            local_seq_lens = metadata.seq_lens_k
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
            local_seq_lens = metadata.seq_lens_k
        else:
            # Plain decode: refresh the int32 lens once per step.
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(seq_lens)
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        self._fill_dcp_block_kv_indices(metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens)


class DcpTRTLLMMLAGraphBackendV2(DcpTRTLLMMLABackend):
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(self, bs, req_pool_indices, seq_lens, forward_mode, metadata):
        if forward_mode.is_target_verify():
            global_lens = seq_lens[:bs] + self.num_draft_tokens
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            global_lens = seq_lens[:bs]
        else:
            global_lens = seq_lens[:bs]
        metadata.global_seq_lens_k.copy_(global_lens)
        metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(global_lens))
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


# expect: clean
@register_dcp_backend("trtllm_mla")
def create_trtllm_mla_dcp(server_args, model_runner):
    dcp = DcpSettings.from_server_args(server_args)
    spec = SpecSettings.from_server_args(server_args)
    if dcp.enabled and getattr(server_args, "speculative_algorithm", None) is not None:
        return DcpTRTLLMMLAGuardedBackend(model_runner, dcp, spec)
    return DcpTRTLLMMLABackend(model_runner, dcp, spec)
