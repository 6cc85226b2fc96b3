"""Issue #8, table 2: `assert batch_desc.cg_mode == CUDAGraphMode.FULL` before the padded count is passed."""

from __future__ import annotations


def test_assert_full_mode_is_a_guard(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class AssertingSpeculator(DraftModelSpeculator):
            def replay(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                assert batch_desc.cg_mode == CUDAGraphMode.FULL, "replay runs FULL graphs only"
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)

            def replay_in(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                n = batch_desc.num_tokens
                assert batch_desc.cg_mode in (CUDAGraphMode.FULL,)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
        """
    )
    assert checked.findings == []


def test_an_assert_after_the_use_does_not_guard_it(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class AssertingSpeculator(DraftModelSpeculator):
            def replay(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                n = batch_desc.num_tokens
                metadata = self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # flagged
                assert batch_desc.cg_mode == CUDAGraphMode.FULL
                return metadata
        """
    )
    assert [(f.code, f.line) for f in checked.findings] == [("SG103", checked.line("# flagged"))]
