"""Issue #8, table 2: `if batch_desc.cg_mode != CUDAGraphMode.FULL: return ...` and the padded count used after it."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "test",
    [
        "batch_desc.cg_mode != CUDAGraphMode.FULL",
        "CUDAGraphMode.FULL != batch_desc.cg_mode",
        "batch_desc.cg_mode is not CUDAGraphMode.FULL",
        "not batch_desc.cg_mode == CUDAGraphMode.FULL",
    ],
)
@pytest.mark.parametrize("leave", ["return self._eager(num_reqs)", "raise RuntimeError('eager')"])
def test_early_return_or_raise_under_the_negated_test_is_a_guard(check_speculator, test, leave) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        f"""
        class EarlyReturnSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                if {test}:
                    {leave}
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)
        """
    )
    assert checked.findings == []


def test_continue_in_a_loop_is_a_guard_for_the_rest_of_the_iteration(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class LoopSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, descs: list[BatchExecutionDescriptor]):
                for batch_desc in descs:
                    if batch_desc.cg_mode != CUDAGraphMode.FULL:
                        continue
                    self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)
        """
    )
    assert checked.findings == []


def test_an_exit_under_the_wrong_test_guards_nothing(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class EarlyReturnSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, other: BatchExecutionDescriptor):
                if batch_desc.cg_mode == CUDAGraphMode.FULL:
                    return None
                if other.cg_mode != CUDAGraphMode.FULL:
                    return None
                return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=batch_desc.num_tokens)  # flagged
        """
    )
    assert [(f.code, f.line) for f in checked.findings] == [("SG103", checked.line("# flagged"))]
