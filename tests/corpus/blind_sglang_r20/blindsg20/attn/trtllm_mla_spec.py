"""Speculative (target-verify / draft-extend) paths of the fork's trtllm_mla.

Under DCP a query with several tokens per request needs the kernel to know
each token's global causal limit; upstream trtllm-gen has no such argument and
refuses those launches, pointing users at cutedsl_mla.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg20.attn._mla_base import ForkMLAPlumbingMixin

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


class DraftExtendDcpTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """Adds a DCP draft-extend path (EAGLE draft extend after verify)."""

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if not (
            forward_batch.forward_mode.is_draft_extend_v2()
            and get_parallel().dcp_enabled
            and self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )

        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        metadata = self._fork_decode_metadata(forward_batch)
        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=tokens_per_req,
        )
        # metadata init already stored this rank's share of every draft row.
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._fork_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return self._fork_finish_dcp(
            raw_out, lse, local_lens, layer, bs, tokens_per_req
        )


class RefusingDraftExtendTRTLLMMLABackend(ForkMLAPlumbingMixin, TRTLLMMLABackend):
    """DCP draft extend: single-row requests decode locally, wider ones refuse."""

    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if (
            forward_batch.forward_mode.is_draft_extend_v2()
            and get_parallel().dcp_enabled
            and self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
        ):
            bs = forward_batch.batch_size
            tokens_per_req = q.shape[0] // max(bs, 1)
            if tokens_per_req > 1:
                raise NotImplementedError(
                    "trtllm_mla cannot bound each draft-extend row causally under "
                    "DCP; run speculative DCP with --attention-backend cutedsl_mla"
                )
            query = self._fork_decode_query(
                q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
            )
            metadata = self._fork_decode_metadata(forward_batch)
            return self._forward_decode_dcp(
                query, self._fork_kv_cache(layer), metadata, layer, forward_batch
            )
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache,
            q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
        )


class SpecVerifyTRTLLMMLABackend(TRTLLMMLABackend):
    """Lets target verify run on trtllm-gen under DCP.

    The verify page table and ``seq_lens`` are already rank-local (see
    ``_apply_dcp_cuda_graph_metadata``), so the kernel sees exactly this
    rank's slice.
    """

    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if get_parallel().dcp_enabled and not return_lse:
            raise NotImplementedError(
                "DCP decode must return the rank-local LSE for the cross-rank merge"
            )
        extra_kwargs = {}
        if self.backend == "trtllm-gen":
            extra_kwargs["multi_ctas_kv_counter_buffer"] = (
                self._multi_ctas_kv_counter_buffer
            )
        else:
            extra_kwargs["backend"] = self.backend
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
            return_lse=return_lse,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            **extra_kwargs,
        )


class AuditedTRTLLMMLABackend(TRTLLMMLABackend):
    """Counts refused DCP launches before surfacing them."""

    num_refused_dcp_launches: int = 0

    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
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
            type(self).num_refused_dcp_launches += 1
            logger.error(
                "refusing DCP trtllm_mla launch (q_len=%d, causal=%s, lse=%s)",
                q_len,
                causal_seqs is not None,
                return_lse,
            )
            raise NotImplementedError(
                "trtllm_mla has no global causal bound for DCP multi-token "
                "queries; use cutedsl_mla"
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
