"""Per-step draft-decode backends for the fork's TRT-LLM MLA multi-step draft.

Step ``i`` of a chain draft attends the committed prefix plus the ``i + 1``
draft tokens written so far; each step backend carries its ``step_id`` and
derives its KV lengths itself instead of relying on per-step kv_indptr.
"""

from __future__ import annotations

import logging

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

from blindsg25.utils import dcp_lens
from blindsg25.utils.mla_prep import (
    decode_metadata,
    paged_kv_cache,
    prepare_decode_query,
    split_out_lse,
)

logger = logging.getLogger(__name__)


class DraftStepTRTLLMMLABackend(TRTLLMMLABackend):
    def __init__(self, model_runner, step_id: int, **kwargs):
        super().__init__(model_runner, skip_prefill=True, **kwargs)
        self.step_id = step_id

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
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (draft step i)
        # expect: SG203
        query = prepare_decode_query(
            self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache
        )
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        kv_lens = (forward_batch.seq_lens[:bs] + (self.step_id + 1)).to(torch.int32)
        dcp = get_parallel().dcp_enabled
        out = self._run_decode_kernel(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=dcp,
        )
        if dcp:
            output, lse = split_out_lse(out[0], out[1], layer)
            return output.flatten(1), lse
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class DraftStepLocalTRTLLMMLABackend(TRTLLMMLABackend):
    def __init__(self, model_runner, step_id: int, **kwargs):
        super().__init__(model_runner, skip_prefill=True, **kwargs)
        self.step_id = step_id

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
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (draft step i)
        # expect: clean
        query = prepare_decode_query(
            self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache
        )
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        kv_lens = self._get_dcp_local_seq_lens(
            forward_batch.seq_lens[:bs] + (self.step_id + 1)
        )
        dcp = get_parallel().dcp_enabled
        out = self._run_decode_kernel(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=dcp,
        )
        if dcp:
            output, lse = split_out_lse(out[0], out[1], layer)
            fixup_zero_kv_rows(output, lse, kv_lens, self.q_indptr_decode[: bs + 1], 1)
            return output.flatten(1), lse
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def forward_decode_no_dcp(self, q, k, layer, forward_batch, q_rope=None, k_rope=None):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (non-DCP fast path)
        # expect: clean
        assert not get_parallel().dcp_enabled, "draft step fast path is DCP-free"
        query = prepare_decode_query(self, q, k, q_rope, k_rope, layer, forward_batch, True)
        metadata = decode_metadata(self, forward_batch)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens + (self.step_id + 1),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (lens via utils module)
        # expect: clean
        bs = forward_batch.batch_size
        local_seq_lens = dcp_lens.rank_local_lens(
            forward_batch.seq_lens[:bs] + (self.step_id + 1)
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output, lse = split_out_lse(raw_out, lse, layer)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    def _forward_decode_dcp_direct(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/dcp/layout.py get_dcp_lens + TRTLLMMLABackend._forward_decode_dcp
        # expect: clean
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_kv_lens = forward_batch.seq_lens[:bs] + (self.step_id + 1)
        local_seq_lens = get_dcp_lens(
            global_kv_lens, parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=parallel.dcp_enabled,
        )
        if not parallel.dcp_enabled:
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        output, lse = split_out_lse(raw_out, lse, layer)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class ForkTRTLLMMLAMultiStepDraftBackend(TRTLLMMLAMultiStepDraftBackend):
    """Multi-step wrapper that installs the step-aware backends."""

    def __init__(self, model_runner, topk: int, speculative_num_steps: int):
        super().__init__(model_runner, topk, speculative_num_steps)
        for i in range(self.speculative_num_steps - 1):
            self.attn_backends[i] = DraftStepLocalTRTLLMMLABackend(
                model_runner,
                step_id=i,
                kv_indptr_buf=self.kv_indptr[i],
                q_indptr_decode_buf=self.q_indptr_decode,
            )
