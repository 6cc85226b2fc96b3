"""Fork variants of the cute-dsl MLA backend (the one DCP-capable MLA decode
kernel: ``enable_dcp`` / ``cp_world`` / ``cp_rank`` /
``causal_seqlens_kv_global``)."""

from __future__ import annotations

import os
from typing import Iterator, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.runtime_context import get_parallel

from blindsg12.attn.kernels import _dcp_decode_entry
from blindsg12.attn.lens import DcpLens, rank_local_kv_lens


class ForkCuteDslMLABackend(CuteDslMLABackend):
    """cute-dsl MLA with the fork's decode / draft-extend DCP entries."""

    def _metadata(self, forward_batch):
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _iter_request_groups(
        self, forward_batch, group_size: int
    ) -> Iterator[Tuple[slice, torch.Tensor]]:
        """Yield (rows, seq_lens) per request group (LoRA-adapter batching)."""
        bs = forward_batch.batch_size
        for start in range(0, bs, group_size):
            rows = slice(start, min(start + group_size, bs))
            yield rows, forward_batch.seq_lens[rows]

    # expect: SG203
    def forward_decode_swapped(self, query, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=local_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out, lse

    # expect: clean
    def forward_decode_kwargs(self, query, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        kernel_kwargs = dict(
            seq_lens=self._get_dcp_local_seq_lens(global_seq_lens),
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            **kernel_kwargs,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            kernel_kwargs["seq_lens"],
            self.q_indptr_decode[: bs + 1],
            1,
        )
        return output.flatten(1), lse

    # expect: SG203
    def forward_decode_dcp_lens(self, query, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        lens = DcpLens.for_seq_lens(
            forward_batch.seq_lens[: forward_batch.batch_size], self.max_context_len
        )
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.global_,
            max_seq_len=lens.max_local,
            layer=layer,
            causal_seqs=lens.global_,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    # expect: clean
    def forward_decode_dcp_lens_local(self, query, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        lens = DcpLens.for_seq_lens(
            forward_batch.seq_lens[: forward_batch.batch_size], self.max_context_len
        )
        return self._run_decode_kernel(
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

    # expect: SG203
    def forward_decode_partial_entry(self, query, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        dcp_decode = _dcp_decode_entry()
        seq_lens = forward_batch.seq_lens.to(torch.int32)
        raw_out, lse = dcp_decode(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=seq_lens,
        )
        return raw_out, lse

    # expect: clean
    def forward_decode_partial_entry_local(self, query, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        dcp_decode = _dcp_decode_entry()
        seq_lens = forward_batch.seq_lens.to(torch.int32)
        raw_out, lse = dcp_decode(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=rank_local_kv_lens(seq_lens),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=seq_lens,
        )
        return raw_out, lse

    # expect: SG203
    def forward_decode_env_lens(self, query, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        if os.environ.get("SGLANG_FORK_DCP_HOISTED_LENS", "1") == "1":
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = global_seq_lens
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    # expect: clean
    def forward_decode_env_lens_local(self, query, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        if os.environ.get("SGLANG_FORK_DCP_HOISTED_LENS", "1") == "1":
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    # expect: SG203
    def forward_draft_extend_dcp(self, q, kv_cache, layer, forward_batch):
        """Draft extend under DCP: padded [bs, max_q, H, D] query."""
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        # see NOTE(draft_extend seq_len handling) in trtllm_mla_backend
        seq_lens = (
            forward_batch.seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
        ).to(torch.int32)
        return self._run_decode_kernel(
            query=q,
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

    # expect: clean
    def forward_draft_extend_dcp_local(self, q, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        seq_lens = (
            forward_batch.seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
        ).to(torch.int32)
        return self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._get_dcp_local_seq_lens(seq_lens),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    # expect: clean
    def forward_draft_extend_dcp_unbounded(self, q, kv_cache, layer, forward_batch):
        """No bound passed: cute-dsl's ``_run_decode_kernel`` refuses under DCP."""
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        return self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    # expect: SG203
    def forward_decode_grouped(self, query, kv_cache, layer, forward_batch, group_size=64):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        outs, lses = [], []
        for rows, seq_lens in self._iter_request_groups(forward_batch, group_size):
            out, lse = self._run_decode_kernel(
                query=query[rows],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[rows],
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                causal_seqs=seq_lens,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        return torch.cat(outs), torch.cat(lses)

    # expect: clean
    def forward_decode_grouped_local(
        self, query, kv_cache, layer, forward_batch, group_size=64
    ):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        outs, lses = [], []
        for rows, seq_lens in self._iter_request_groups(forward_batch, group_size):
            out, lse = self._run_decode_kernel(
                query=query[rows],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[rows],
                seq_lens=self._get_dcp_local_seq_lens(seq_lens),
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                causal_seqs=seq_lens,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        return torch.cat(outs), torch.cat(lses)
