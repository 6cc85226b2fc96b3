"""Speculative (verify / draft-extend) and host-length decode runners that sit
beside the MLA backends on DCP deployments."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg7.attn.launch import launch_mla_decode, local_max_seq_len, rank_local_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention


class MLASpecDecodeRunner:
    """Runs the speculative MLA kernels against a trtllm_mla backend's buffers."""

    def __init__(self, backend: TRTLLMMLABackend, kernel: str = "cute-dsl"):
        self.backend = backend
        self.kernel = kernel

    def _metadata(self, forward_batch: ForwardBatch):
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.backend.forward_decode_metadata
        )

    # expect: SG203
    def run_draft_extend(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        max_q = metadata.max_seq_len_q
        query = query.view(bs, max_q, layer.tp_q_head_num, layer.head_dim)
        dcp = get_parallel().dcp_enabled
        return launch_mla_decode(
            self.backend,
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k + (0 if dcp else max_q),
            self.backend._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
            kernel=self.kernel,
        )

    # expect: clean
    def run_draft_extend_checked(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        max_q = metadata.max_seq_len_q
        query = query.view(bs, max_q, layer.tp_q_head_num, layer.head_dim)
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "draft extend with decode context parallel is not supported by "
                f"the {self.kernel} spec runner; disable DCP for the draft model"
            )
        return launch_mla_decode(
            self.backend,
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k + max_q,
            self.backend._compute_decode_bmm1_scale(layer),
            kernel=self.kernel,
        )

    # expect: SG203
    def run_target_verify(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        parallel = get_parallel()
        if parallel.dcp_enabled:
            return launch_mla_decode(
                self.backend,
                query,
                kv_cache,
                metadata.block_kv_indices,
                metadata.seq_lens_k,
                metadata.max_seq_len_k,
                self.backend._compute_decode_bmm1_scale(layer),
                return_lse=True,
                kernel=self.kernel,
            )
        return launch_mla_decode(
            self.backend,
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k + draft_token_num,
            self.backend._compute_decode_bmm1_scale(layer),
            kernel=self.kernel,
        )

    # expect: clean
    def run_target_verify_guarded(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "target verify under DCP requires the cutedsl_mla backend"
            )
        return launch_mla_decode(
            self.backend,
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k + draft_token_num,
            self.backend._compute_decode_bmm1_scale(layer),
            kernel=self.kernel,
        )


class HostLensDecodeRunner:
    """Decode driven from the scheduler's host-side lengths (no D2H sync)."""

    def __init__(self, backend: TRTLLMMLABackend):
        self.backend = backend

    def _launch(self, query, kv_cache, block_tables, seq_lens, max_seq_len, layer):
        return launch_mla_decode(
            self.backend,
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            self.backend._compute_decode_bmm1_scale(layer),
            return_lse=get_parallel().dcp_enabled,
        )

    # expect: SG203
    def decode(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        host_lens = forward_batch.seq_lens_cpu[:bs]
        parallel = get_parallel()
        max_seq_len = local_max_seq_len(
            int(host_lens.max()), parallel.dcp_size if parallel.dcp_enabled else 1,
            parallel.dcp_rank if parallel.dcp_enabled else 0,
        )
        seq_lens = host_lens.to(query.device, non_blocking=True)
        return self._launch(query, kv_cache, block_tables, seq_lens, max_seq_len, layer)

    # expect: clean
    def decode_rank_local(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        host_lens = forward_batch.seq_lens_cpu[:bs]
        parallel = get_parallel()
        max_seq_len = local_max_seq_len(
            int(host_lens.max()), parallel.dcp_size if parallel.dcp_enabled else 1,
            parallel.dcp_rank if parallel.dcp_enabled else 0,
        )
        seq_lens = rank_local_lens(host_lens).to(query.device, non_blocking=True)
        return self._launch(query, kv_cache, block_tables, seq_lens, max_seq_len, layer)
