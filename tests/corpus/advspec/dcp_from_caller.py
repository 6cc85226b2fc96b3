"""Adversarial corpus, SG105: the caller hands the draft's own lengths in; the helper passes them on."""

from __future__ import annotations

from vllm.v1.worker.gpu.attn_utils import build_attn_metadata


class DraftModelSpeculator:
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py (0.33.0) DraftModelSpeculator
    #        ._build_attn_metadata (`dcp_local_seq_lens` parameter), without a recompute of its own
    # expect: clean
    def _build_uniform_attn_metadata(self, num_reqs, num_tokens, query_start_loc_cpu, draft_dcp_local_seq_lens):
        local_lens = draft_dcp_local_seq_lens[:num_reqs]
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            dcp_local_seq_lens=local_lens,
        )
