"""Adversarial corpus, SG105: the draft's lengths are recomputed only after the build, for the next step."""

from __future__ import annotations

from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens


class DraftModelSpeculator:
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py (the DCP fix's call), moved after the
    #        build that needed it
    # expect: SG105
    def _build_draft_attn_metadata(self, num_reqs, num_tokens_padded, query_start_loc_cpu):
        attn_metadata = build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens_padded,
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            dcp_local_seq_lens=self.input_buffers.dcp_local_seq_lens,
        )
        if self.dcp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return attn_metadata
