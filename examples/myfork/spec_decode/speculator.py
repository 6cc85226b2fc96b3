from myfork.attn_utils import build_attn_metadata


class BaseSpeculator:
    def propose(self, *args, **kwargs):
        raise NotImplementedError


class DraftModelSpeculator(BaseSpeculator):
    def _build_draft_attn_metadata(self, num_reqs, num_tokens_padded, query_start_loc_cpu):
        # SG105: builds draft metadata with the target's (stale) DCP rank-local lengths
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=num_tokens_padded,
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.input_buffers.seq_lens,
        )
