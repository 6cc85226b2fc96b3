"""Adversarial corpus, SG105: the shared helper passes no DCP-local lengths at all (vLLM 0.28.0's shape)."""

from __future__ import annotations

from vllm.v1.worker.gpu.attn_utils import build_attn_metadata


class DraftModelSpeculator:
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py (0.28.0)
    #        DraftModelSpeculator._build_draft_attn_metadata
    # expect: SG105
    def _build_draft_attn_metadata(self, num_reqs, num_tokens_padded, query_start_loc_cpu):
        kwargs = dict(attn_groups=self.attn_groups, num_reqs=num_reqs, num_tokens=num_tokens_padded)
        return build_attn_metadata(
            **kwargs,
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
        )
