"""Fork multi-step draft backends: eager per-step MLA draft-decode launches.

The EAGLE draft loop calls ``run_draft_step`` for step ``i`` when the draft
graph cannot replay; every step is a q_len == 1 decode over ``topk`` rows per
request that attends the prefix plus the ``i + 1`` draft tokens written so far.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import (
    CuteDslMLAMultiStepDraftBackend,
)
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

from blindsg26.common.settings import DcpLayout


class _StepLaunchMixin:
    def _step_metadata(self, step: int):
        backend = self.attn_backends[step]
        return backend, backend.forward_decode_metadata

    def _step_global_lens(self, forward_batch, step: int) -> torch.Tensor:
        lens = forward_batch.seq_lens[: forward_batch.batch_size] + (step + 1)
        if self.topk > 1:
            lens = lens.repeat_interleave(self.topk)
        return lens.to(torch.int32)


class ForkTRTLLMMLAMultiStepDraftBackend(_StepLaunchMixin, TRTLLMMLAMultiStepDraftBackend):
    def __init__(
        self,
        model_runner,
        topk: int,
        speculative_num_steps: int,
        backend: str = "trtllm-gen",
    ):
        super().__init__(model_runner, topk, speculative_num_steps, backend=backend)
        self.dcp = DcpLayout.current()

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend (per-step TRTLLMMLABackend._run_decode_kernel)
    # expect: SG203
    def run_draft_step(self, step: int, query, kv_cache, layer, forward_batch):
        backend, metadata = self._step_metadata(step)
        step_lens = self._step_global_lens(forward_batch, step)
        if self.dcp.enabled:
            return backend._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=step_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
        return backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=step_lens,
            max_seq_len=metadata.max_seq_len_k + step + 1,
            layer=layer,
        )


class LocalStepTRTLLMMLAMultiStepDraftBackend(ForkTRTLLMMLAMultiStepDraftBackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend with get_dcp_lens per step
    # expect: clean
    def run_draft_step(self, step: int, query, kv_cache, layer, forward_batch):
        backend, metadata = self._step_metadata(step)
        step_lens = self._step_global_lens(forward_batch, step)
        if self.dcp.enabled:
            local_lens = get_dcp_lens(step_lens, self.dcp.size, self.dcp.rank).to(
                torch.int32
            )
            return backend._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=local_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
        return backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=step_lens,
            max_seq_len=metadata.max_seq_len_k + step + 1,
            layer=layer,
        )


class ForkCuteDslMLAMultiStepDraftBackend(_StepLaunchMixin, CuteDslMLAMultiStepDraftBackend):
    def __init__(self, model_runner, topk: int, speculative_num_steps: int):
        super().__init__(model_runner, topk, speculative_num_steps)
        self.dcp = DcpLayout.current()

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLAMultiStepDraftBackend (per-step CuteDslMLABackend._run_decode_kernel)
    # expect: SG203
    def run_draft_step(self, step: int, query, kv_cache, layer, forward_batch):
        backend, metadata = self._step_metadata(step)
        step_lens = self._step_global_lens(forward_batch, step)
        parallel = get_parallel()
        return backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=step_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=step_lens,
            cp_world=parallel.attn_dcp_size,
            cp_rank=parallel.attn_dcp_rank,
            return_lse=parallel.dcp_enabled,
        )


class LocalStepCuteDslMLAMultiStepDraftBackend(ForkCuteDslMLAMultiStepDraftBackend):
    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLAMultiStepDraftBackend with rank-local step lens (get_dcp_lens) and the global bound
    # expect: clean
    def run_draft_step(self, step: int, query, kv_cache, layer, forward_batch):
        backend, metadata = self._step_metadata(step)
        step_lens = self._step_global_lens(forward_batch, step)
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return backend._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=step_lens,
                max_seq_len=metadata.max_seq_len_k + step + 1,
                layer=layer,
            )
        local_lens = get_dcp_lens(step_lens, parallel.dcp_size, parallel.dcp_rank).to(
            torch.int32
        )
        return backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=step_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
