"""DCP decode variants of the fork's trtllm MLA backend.

Each class below overrides one piece of the DCP decode path; the non-DCP and
fp8 paths always fall through to upstream.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg23.attn.mla_fork_base import ForkTRTLLMMLABase


class DcpDecodeBackendBase(ForkTRTLLMMLABase):
    """Shared prep for the DCP decode overrides (bf16 KV only)."""

    def _dcp_decode_applies(self, forward_batch: ForwardBatch) -> bool:
        return (
            get_parallel().dcp_enabled
            and self.data_type == torch.bfloat16
            and forward_batch.forward_mode.is_decode_or_idle()
        )

    def _prep_dcp_decode(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._write_kv_and_build_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        if query.dim() == 3:
            query = query.unsqueeze(1)
        metadata = self._decode_metadata(forward_batch)
        return query, self._kv_cache_view(layer), metadata, forward_batch.batch_size


class GlobalLensDecodeBackend(DcpDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode -> _forward_decode_dcp
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not self._dcp_decode_applies(forward_batch) or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        # The block table was built rank-local by init_forward_metadata; the
        # kernel only needs the per-request lengths next to it.
        kv_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)


class LocalLensDecodeBackend(DcpDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (_get_dcp_local_seq_lens)
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not self._dcp_decode_applies(forward_batch) or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)


class MetadataGlobalDecodeBackend(DcpDecodeBackendBase):
    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted metadata lens)
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not self._dcp_decode_applies(forward_batch) or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        # Both length buffers are refreshed once per step by metadata init /
        # graph replay; global_seq_lens_k is already int32, so no per-layer cast.
        kv_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._launch_mla(
            query,
            kv_cache,
            metadata.block_kv_indices,
            kv_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)


class MetadataLocalDecodeBackend(DcpDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (seq_lens_k made rank-local)
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not self._dcp_decode_applies(forward_batch) or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        # Upstream init_forward_metadata / _apply_dcp_cuda_graph_metadata keep
        # the whole-sequence lengths in global_seq_lens_k and this rank's share
        # in seq_lens_k; the kernel walks the latter.
        kv_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._launch_mla(
            query,
            kv_cache,
            metadata.block_kv_indices,
            kv_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)


class FallbackDecodeBackend(DcpDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            kv_lens = metadata.seq_lens_k[:bs]
        else:
            # Autotune / capture dummies arrive without hoisted lens; the raw
            # batch lengths are good enough to size the launch.
            kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)


class SafeFallbackDecodeBackend(DcpDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (fallback via get_dcp_lens)
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            kv_lens = metadata.seq_lens_k[:bs]
        else:
            parallel = get_parallel()
            kv_lens = get_dcp_lens(
                forward_batch.seq_lens[:bs], parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)


class DraftStepDecodeBackendBase(DcpDecodeBackendBase):
    """Per-step backend of the fork's chain draft (topk == 1).

    ``step_index`` is set by the owning multi-step wrapper; draft step i reads
    the committed prefix plus the i + 1 draft slots written so far.
    """

    def __init__(self, model_runner, step_index: int = 0, **kwargs):
        super().__init__(model_runner, skip_prefill=True, **kwargs)
        self.step_index = step_index


class DraftStepDecodeBackend(DraftStepDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend (per-step draft decode)
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not self._dcp_decode_applies(forward_batch) or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        step_lens = (forward_batch.seq_lens[:bs] + (self.step_index + 1)).to(
            torch.int32
        )
        # The shared table stops at the committed prefix; rebuild it to cover
        # this step's draft slot (the builder shards it to this rank).
        block_tables = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(self.max_context_len),
            forward_batch.req_pool_indices,
            step_lens,
            step_lens.device,
        )
        raw_out, lse = self._launch_mla(
            query,
            kv_cache,
            block_tables,
            step_lens,
            self._get_dcp_local_max_seq_len(self.max_context_len),
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, step_lens, layer, bs)


class DraftStepDecodeBackendLocal(DraftStepDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend + layers/dcp/layout.py get_dcp_lens
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not self._dcp_decode_applies(forward_batch) or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        global_step_lens = forward_batch.seq_lens[:bs] + (self.step_index + 1)
        # The table builder takes the whole-sequence lengths and shards itself.
        block_tables = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(self.max_context_len),
            forward_batch.req_pool_indices,
            global_step_lens,
            global_step_lens.device,
        )
        parallel = get_parallel()
        step_lens = get_dcp_lens(
            global_step_lens, parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        raw_out, lse = self._launch_mla(
            query,
            kv_cache,
            block_tables,
            step_lens,
            self._get_dcp_local_max_seq_len(self.max_context_len),
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, step_lens, layer, bs)
