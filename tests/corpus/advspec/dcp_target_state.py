"""Adversarial corpus, SG105: the shared helper hands the sink the target model's DCP-local lengths (`self.` state
the target prepared), not the draft's own."""

from __future__ import annotations

from vllm.v1.worker.gpu.attn_utils import build_attn_metadata


class DraftModelSpeculator:
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn
    #        (`dcp_local_seq_lens=input_batch.dcp_local_seq_lens`: right for the target, stale for a draft step)
    # expect: SG105
    def _build_draft_attn_metadata(self, num_reqs, num_tokens_padded, query_start_loc_cpu):
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens_padded,
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            dcp_local_seq_lens=self.input_buffers.dcp_local_seq_lens[:num_reqs],
        )
