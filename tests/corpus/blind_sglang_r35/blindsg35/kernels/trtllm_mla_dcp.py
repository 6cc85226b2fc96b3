"""trtllm-gen MLA decode under DCP.

The trtllm-gen kernel has no in-kernel DCP support: a ``q_len == 1`` decode is
served with the rank-local page table and rank-local ``seq_lens`` (the causal
bound does not vary across a single query row), while multi-token queries
(target verify / draft extend) need ``causal_seqlens_kv_global``, which only
the cute-dsl backend takes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Dict, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg35.kernels._mla_common import DcpMetadataMixin, is_decode_family

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.int32 else t.to(torch.int32)


class CloudTRTLLMMLABackend(DcpMetadataMixin, TRTLLMMLABackend):
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        if not is_decode_family(forward_batch):
            return super().init_forward_metadata(forward_batch)
        metadata = self._decode_family_metadata(forward_batch)
        metadata.seq_lens_k = metadata.global_seq_lens_k
        if get_parallel().dcp_enabled:
            self._localize_in_place(metadata)
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (DCP hoist)
    # expect: SG203
    def _localize_in_place(self, metadata: TRTLLMMLADecodeMetadata) -> None:
        seq_lens_k = metadata.seq_lens_k
        if seq_lens_k is None:
            return
        parallel = get_parallel()
        seq_lens_k = get_dcp_lens(seq_lens_k, parallel.dcp_size, parallel.dcp_rank)
        seq_lens_k = _i32(seq_lens_k)

    def _launch(self, query, kv_cache, block_tables, seq_lens, max_seq_len, layer, **extra):
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=_i32(seq_lens),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
            **extra,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel
    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        parallel = get_parallel()
        q_len = query.shape[1] if query.dim() == 4 else 1
        # Short MTP windows stay within one cyclic stride of the DCP group, so
        # the rank-local bound is exact for them; only refuse long windows.
        if parallel.dcp_enabled and q_len > max(4, parallel.dcp_size):
            raise NotImplementedError(
                f"trtllm-gen cannot bound a {q_len}-token window under DCP"
            )
        return self._launch(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            layer,
            return_lse=return_lse or parallel.dcp_enabled,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (ragged verify)
    # expect: SG203
    def _run_decode_kernel_compact(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        cum_seq_lens_q: Optional[torch.Tensor] = None,
        max_q_len: Optional[int] = None,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and q_len > 1:
            raise NotImplementedError("multi-token trtllm-gen decode under DCP")
        return self._launch(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            layer,
            cum_seq_lens_q=cum_seq_lens_q,
            max_q_len=max_q_len,
            return_lse=get_parallel().dcp_enabled,
        )

    def forward_ragged_verify(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        """Compact ``[total_q, H, D]`` verify for ragged layouts."""
        layout = forward_batch.spec_info.ragged_verify_layout
        metadata = forward_batch.decode_trtllm_mla_metadata
        kv_cache = self._kv_cache(layer)
        q = q.view(-1, layer.tp_q_head_num, layer.head_dim).to(self.data_type)
        return self._run_decode_kernel_compact(
            q,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k,
            layer,
            cum_seq_lens_q=layout.qo_indptr_device,
            max_q_len=int(forward_batch.spec_info.draft_token_num),
        )

    def _kv_cache(self, layer: "RadixAttention") -> torch.Tensor:
        from sglang.srt.mem_cache.layout.paged_view import paged_row_view

        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target verify, DCP)
    # expect: SG203
    def forward_target_verify_dcp(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: "ForwardBatch"
    ):
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        metadata = forward_batch.decode_trtllm_mla_metadata
        if get_parallel().dcp_enabled:
            logger.warning_once(
                "trtllm-gen verify under DCP runs without a global causal bound; "
                "prefer cutedsl_mla for speculative DCP runs"
            )
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = self._launch(
            q.to(self.data_type),
            self._kv_cache(layer),
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        return output.flatten(1), lse

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        # The page table already restricts the read to this rank's pages, so
        # the request lengths can go to the kernel as they are.
        if metadata.global_seq_lens_k is not None:
            seq_lens = metadata.global_seq_lens_k[:bs]
        else:
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
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        return output.flatten(1), lse


class CloudTRTLLMMLABackendStrict(CloudTRTLLMMLABackend):
    """Production line: refuses every DCP path the trtllm-gen kernel cannot bound."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (DCP hoist)
    # expect: clean
    def _localize_in_place(self, metadata: TRTLLMMLADecodeMetadata) -> None:
        if metadata.seq_lens_k is None:
            return
        metadata.global_seq_lens_k = metadata.seq_lens_k
        metadata.seq_lens_k = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel
    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and (
            q_len > 1 or causal_seqs is not None or not return_lse
        ):
            raise NotImplementedError(
                "trtllm_mla cannot forward a global causal bound to its decode "
                "kernel (DCP with q_len > 1); select cutedsl_mla"
            )
        return self._launch(
            query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
            return_lse=return_lse,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (ragged verify)
    # expect: clean
    def _run_decode_kernel_compact(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        cum_seq_lens_q: Optional[torch.Tensor] = None,
        max_q_len: Optional[int] = None,
    ):
        if cum_seq_lens_q is not None:
            q_len = max_q_len if max_q_len is not None else 2
        else:
            q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and q_len > 1:
            raise NotImplementedError("multi-token trtllm-gen decode under DCP")
        return self._launch(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            layer,
            cum_seq_lens_q=cum_seq_lens_q,
            max_q_len=max_q_len,
            return_lse=get_parallel().dcp_enabled,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target verify, DCP)
    # expect: clean
    def forward_target_verify_dcp(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: "ForwardBatch"
    ):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm-gen verify under DCP has no global causal bound; "
                "serve speculative DCP with cutedsl_mla"
            )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        metadata = forward_batch.decode_trtllm_mla_metadata
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out = self._launch(
            q.to(self.data_type),
            self._kv_cache(layer),
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k + draft_token_num,
            layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        # q_len == 1: the rank-local page table and lengths describe the shard
        # completely, no global bound needed.
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
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class CloudPagedTRTLLMMLABackend(CloudTRTLLMMLABackendStrict):
    """Large-page pools (page_size >= 64)."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_seq_lens
    # expect: SG203
    def _get_dcp_local_seq_lens(self, seq_lens: torch.Tensor) -> torch.Tensor:
        if self.page_size >= 64:
            # Whole pages live on one rank with large pages, so the page table
            # built from the request lengths is already this rank's view.
            return _i32(seq_lens)
        return super()._get_dcp_local_seq_lens(seq_lens)


class CloudCachedTRTLLMMLABackend(CloudTRTLLMMLABackendStrict):
    """Caches the per-rank length buffers per batch size."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._local_lens_by_bs: Dict[int, torch.Tensor] = {}

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_seq_lens
    # expect: clean
    def _get_dcp_local_seq_lens(self, seq_lens: torch.Tensor) -> torch.Tensor:
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return seq_lens
        bs = seq_lens.shape[0]
        buf = self._local_lens_by_bs.get(bs)
        if buf is None:
            buf = torch.empty((bs,), dtype=torch.int32, device=seq_lens.device)
            self._local_lens_by_bs[bs] = buf
        buf.copy_(get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank))
        return buf
