"""Adversarial corpus, SG105: the draft's lengths recomputed by a helper method that returns them."""

from __future__ import annotations

from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens


class DraftModelSpeculator:
    def _draft_dcp_lens(self, num_reqs):
        if self.dcp_size == 1:
            return None
        return prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            num_reqs,
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py (0.33.0)
    #        DraftModelSpeculator._build_attn_metadata (`dcp_local_seq_lens = prepare_dcp_local_seq_lens(...)`),
    #        moved into a helper
    # expect: clean
    def _build_attn_metadata(self, num_reqs, num_tokens, query_start_loc_cpu):
        lens = self._draft_dcp_lens(num_reqs)
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            dcp_local_seq_lens=lens,
        )
