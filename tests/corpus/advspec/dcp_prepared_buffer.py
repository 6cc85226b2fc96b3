"""Adversarial corpus, SG105: the shared helper recomputes the draft's DCP-local lengths into the buffer it hands on
(upstream's DCP fix, the second seed)."""

from __future__ import annotations

from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens


class DraftModelSpeculator:
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator
    #        ._build_draft_attn_metadata (the DCP fix: `prepare_dcp_local_seq_lens(self.input_buffers
    #        .dcp_local_seq_lens, ...)` when `dcp_local_seq_lens is None and self.block_tables.cp_size > 1`)
    # expect: clean
    def _build_draft_attn_metadata(self, num_reqs, num_tokens_padded, query_start_loc_cpu, dcp_local_seq_lens=None):
        if dcp_local_seq_lens is None and self.block_tables.cp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens_padded,
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            dcp_local_seq_lens=None if dcp_local_seq_lens is None else dcp_local_seq_lens[:num_reqs],
        )
