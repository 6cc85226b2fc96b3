"""Issue #8, acceptance: a branch that assigns the padded count under FULL and the real one otherwise."""

from __future__ import annotations


def test_if_elif_else_assignments(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class BranchSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np, profiling):
                if profiling:
                    n = 1
                elif batch_desc.cg_mode is CUDAGraphMode.FULL:
                    n = batch_desc.num_tokens
                else:
                    n = int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)

            def propose_ternary(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                n = batch_desc.num_tokens if CUDAGraphMode.FULL == batch_desc.cg_mode else int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
        """
    )
    assert checked.findings == []


def test_the_branches_swapped_are_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class BranchSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                if batch_desc.cg_mode == CUDAGraphMode.FULL:
                    n = int(query_start_loc_np[-1])
                else:
                    n = batch_desc.num_tokens
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # flagged
        """
    )
    assert [f.line for f in checked.findings] == [checked.line("# flagged")]
