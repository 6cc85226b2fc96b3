"""Issue #8, table 2: `match batch_desc.cg_mode:` with `case CUDAGraphMode.FULL:` assigning the padded count."""

from __future__ import annotations


def test_match_with_a_full_case(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class MatchingSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                match batch_desc.cg_mode:
                    case CUDAGraphMode.FULL:
                        n = batch_desc.num_tokens
                    case _:
                        n = int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
        """
    )
    assert checked.findings == []


def test_the_padded_count_in_a_non_full_case_is_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class MatchingSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                match batch_desc.cg_mode:
                    case CUDAGraphMode.FULL:
                        n = batch_desc.num_tokens
                    case CUDAGraphMode.PIECEWISE:
                        n = batch_desc.num_tokens
                    case _:
                        n = int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # flagged
        """
    )
    (finding,) = checked.findings
    assert finding.line == checked.line("# flagged")
    assert f"through `n` (line {checked.line('case CUDAGraphMode.PIECEWISE') + 1})" in finding.message
