from myfork import attn_utils
from myfork.cp_utils import prepare_dcp_local_seq_lens as prep_dcp
from myfork.spec_decode import speculator as base
from myfork.worker.dp_utils import dispatch_cg_and_sync_dp


class DFlashSpeculator(base.DraftModelSpeculator):
    def propose(self, num_reqs, num_query_tokens, query_start_loc_cpu):
        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_query_tokens)
        num_tokens_padded = batch_desc.num_tokens
        # SG104: the shared helper already prepares DCP rank-local lengths
        prep_dcp(self.dcp_local_seq_lens, self.seq_lens, num_reqs, self.cp_size, self.cp_rank, 1)
        # SG103: the DP-padded count reaches the helper in eager/PIECEWISE mode too
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_tokens_padded=num_tokens_padded,
            query_start_loc_cpu=query_start_loc_cpu,
        )

    # SG102: overrides the shared helper
    def _build_draft_attn_metadata(self, num_reqs, num_tokens_padded, query_start_loc_cpu):
        return super()._build_draft_attn_metadata(num_reqs, num_tokens_padded, query_start_loc_cpu)

    def prefill_metadata(self, num_reqs, query_start_loc_cpu):
        # SG101: builds metadata outside the shared helper
        return attn_utils.build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=int(query_start_loc_cpu[-1]),
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.seq_lens,
        )
