"""Issue #8, acceptance: the padded count passed through `max(num_tokens, batch_desc.num_tokens)`."""

from __future__ import annotations


def test_max_with_the_padded_count_is_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class MaxSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, num_tokens, batch_desc: BatchExecutionDescriptor):
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs, num_tokens_padded=max(num_tokens, batch_desc.num_tokens),  # flagged
                )

            def propose_rounded(self, num_reqs, num_tokens, batch_desc: BatchExecutionDescriptor):
                n = int(min(batch_desc.num_tokens, 8192)) + 0
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # arithmetic
        """
    )
    assert [(f.code, f.line) for f in checked.findings] == [
        ("SG103", checked.line("# flagged")),
        ("SG103", checked.line("# arithmetic")),
    ]
    assert "it gets there" not in checked.findings[0].message  # direct: no path to name


def test_a_real_count_is_still_real_after_max_with_another_real_count(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class MaxSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, num_tokens, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                n = max(num_tokens, int(query_start_loc_np[-1]))
                return self._build_draft_attn_metadata(num_reqs=batch_desc.num_reqs, num_tokens_padded=n)
        """
    )
    assert checked.findings == []
