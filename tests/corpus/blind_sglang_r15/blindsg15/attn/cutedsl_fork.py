"""cute-dsl MLA decode backends (DCP-capable kernel) with fork tweaks.

All variants keep the upstream non-DCP path (``super().forward_decode``) and
re-implement the DCP branch.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg15.attn.dcp_utils import (
    DcpLens,
    ForkMLAQueryMixin,
    dcp_split_lens,
    int32_lens,
    iter_step_dcp_lens,
    iter_step_lens,
)

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


class _ForkCuteBase(ForkMLAQueryMixin, CuteDslMLABackend):
    def _non_dcp(self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                 cos_sin_cache, is_neox, llama_4_scaling):
        return CuteDslMLABackend.forward_decode(
            self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )

    def _dcp_prologue(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query, kv_cache = self._fork_prepare_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        return query, kv_cache, self._fork_metadata(forward_batch), forward_batch.batch_size


class ForkCuteDslBatchLensBackend(_ForkCuteBase):
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        # DP padding can leave the hoisted buffers shorter than the batch;
        # the batch's own lengths always cover every row.
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, seq_lens, layer, bs)


class ForkCuteDslSplitLensBackend(_ForkCuteBase):
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        lens: DcpLens = dcp_split_lens(
            forward_batch.seq_lens[:bs], self.max_context_len
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=lens.global_,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, lens.local, layer, bs)


class ForkCuteDslHandBuiltLensBackend(_ForkCuteBase):
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        global_lens = metadata.global_seq_lens_k[:bs]
        lens = DcpLens(
            local=global_lens,
            global_=global_lens,
            max_local=metadata.max_seq_len_k,
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=lens.max_local,
            layer=layer,
            causal_seqs=lens.global_,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, lens.local, layer, bs)


class ForkCuteDslHostLensBackend(_ForkCuteBase):
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        launch = {
            "query": query,
            "kv_cache": kv_cache,
            "block_tables": metadata.block_kv_indices,
            "seq_lens": metadata.seq_lens_k[:bs],
            "max_seq_len": metadata.max_seq_len_k,
            "layer": layer,
            "causal_seqs": metadata.global_seq_lens_k[:bs],
            "cp_world": parallel.dcp_size,
            "cp_rank": parallel.dcp_rank,
            "return_lse": True,
        }
        if forward_batch.seq_lens_cpu is not None:
            # Prefer the host mirror when the scheduler provided one: it is
            # never stale after a plan-stream overlap.
            launch["seq_lens"] = forward_batch.seq_lens_cpu[:bs].to(
                query.device, dtype=torch.int32, non_blocking=True
            )
        raw_out, lse = self._run_decode_kernel(**launch)
        return self._fork_finish_dcp(raw_out, lse, launch["seq_lens"], layer, bs)


class ForkCuteDslPartialBackend(_ForkCuteBase):
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None,
                 q_indptr_decode_buf=None):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        parallel = get_parallel()
        self._dcp_decode = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        local = metadata.seq_lens_k[:bs]
        raw_out, lse = self._dcp_decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
        )
        return self._fork_finish_dcp(raw_out, lse, local, layer, bs)


class ForkCuteDslPartialBatchLensBackend(ForkCuteDslPartialBackend):
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not get_parallel().dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._dcp_decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            causal_seqlens_kv_global=kv_lens,
        )
        return self._fork_finish_dcp(raw_out, lse, kv_lens, layer, bs)


class ForkCuteDslCtxLensBackend(_ForkCuteBase):
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        with int32_lens(forward_batch.seq_lens[:bs]) as lens:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                causal_seqs=lens,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
            return self._fork_finish_dcp(raw_out, lse, lens, layer, bs)


class ForkCuteDslClosureBackend(_ForkCuteBase):
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        global_lens = metadata.global_seq_lens_k[:bs]

        def _launch(kv_lens):
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=kv_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                causal_seqs=global_lens,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )

        raw_out, lse = _launch(global_lens)
        return self._fork_finish_dcp(raw_out, lse, global_lens, layer, bs)


class ForkCuteDslInPlaceBackend(_ForkCuteBase):
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_lens = global_lens.clone()
        update_local_kv_lens_for_dcp(kv_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, kv_lens, layer, bs)


class ForkCuteDslTempLocalizeBackend(_ForkCuteBase):
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_lens = global_lens
        update_local_kv_lens_for_dcp(kv_lens.clone())
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, kv_lens, layer, bs)


class ForkCuteDslHoistedBackend(_ForkCuteBase):
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self._non_dcp(q, k, v, layer, forward_batch, save_kv_cache,
                                 q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling)
        query, kv_cache, metadata, bs = self._dcp_prologue(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
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
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, local_lens, layer, bs)


class ForkCuteDslDraftStepsBackend(_ForkCuteBase):
    """Fused chain draft: the draft's single MLA layer attends once per step
    over the same page table, the lengths growing by one token per step."""

    # expect: SG203
    def run_draft_steps(self, queries, kv_cache, layer, forward_batch: ForwardBatch,
                        num_steps: int):
        parallel = get_parallel()
        metadata = self._fork_metadata(forward_batch)
        bs = forward_batch.batch_size
        outs = []
        for step, lens in iter_step_lens(forward_batch.seq_lens[:bs], num_steps):
            if parallel.dcp_enabled:
                raw_out, lse = self._run_decode_kernel(
                    query=queries[step],
                    kv_cache=kv_cache,
                    block_tables=metadata.block_kv_indices,
                    seq_lens=lens,
                    max_seq_len=metadata.max_seq_len_k + step + 1,
                    layer=layer,
                    causal_seqs=lens,
                    cp_world=parallel.dcp_size,
                    cp_rank=parallel.dcp_rank,
                    return_lse=True,
                )
                outs.append(self._fork_finish_dcp(raw_out, lse, lens, layer, bs))
            else:
                outs.append(
                    self._run_decode_kernel(
                        query=queries[step],
                        kv_cache=kv_cache,
                        block_tables=metadata.block_kv_indices,
                        seq_lens=lens,
                        max_seq_len=metadata.max_seq_len_k + step + 1,
                        layer=layer,
                    )
                )
        return outs

    # expect: clean
    def run_draft_steps_local(self, queries, kv_cache, layer,
                              forward_batch: ForwardBatch, num_steps: int):
        parallel = get_parallel()
        metadata = self._fork_metadata(forward_batch)
        bs = forward_batch.batch_size
        outs = []
        for step, lens in iter_step_dcp_lens(forward_batch.seq_lens[:bs], num_steps):
            if parallel.dcp_enabled:
                raw_out, lse = self._run_decode_kernel(
                    query=queries[step],
                    kv_cache=kv_cache,
                    block_tables=metadata.block_kv_indices,
                    seq_lens=lens.local,
                    max_seq_len=lens.max_local,
                    layer=layer,
                    causal_seqs=lens.global_,
                    cp_world=parallel.dcp_size,
                    cp_rank=parallel.dcp_rank,
                    return_lse=True,
                )
                outs.append(self._fork_finish_dcp(raw_out, lse, lens.local, layer, bs))
            else:
                outs.append(
                    self._run_decode_kernel(
                        query=queries[step],
                        kv_cache=kv_cache,
                        block_tables=metadata.block_kv_indices,
                        seq_lens=lens.global_,
                        max_seq_len=lens.max_local,
                        layer=layer,
                    )
                )
        return outs
