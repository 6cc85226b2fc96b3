"""Issue #8, table 1: the padded count handed to the helper by position, not by keyword."""

from __future__ import annotations


def test_positional_argument_to_the_shared_helper_is_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    # 0.28.0's helper: _build_draft_attn_metadata(self, num_reqs, num_reqs_padded, num_tokens_padded, ...)
    checked = check_speculator(
        """
        class PositionalSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
                return self._build_draft_attn_metadata(
                    num_reqs, batch_desc.num_reqs, batch_desc.num_tokens, seq_lens, 1  # flagged
                )
        """
    )
    (finding,) = checked.findings
    assert finding.code == "SG103" and finding.line == checked.line("# flagged")
    assert "as `num_tokens_padded` (by position) to `_build_draft_attn_metadata`" in finding.message
    # the column is the third argument's, not the call's
    assert checked.text.splitlines()[finding.line - 1][finding.col - 1 :].startswith("batch_desc.num_tokens, seq_lens")


def test_other_positions_are_not_the_token_count(check_speculator) -> None:  # type: ignore[no-untyped-def]
    """The padded count in the `num_reqs_padded` position is not a token count: positions map to names."""
    checked = check_speculator(
        """
        class PositionalSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
                return self._build_draft_attn_metadata(num_reqs, batch_desc.num_tokens, num_reqs, seq_lens, 1)
        """
    )
    assert checked.findings == []


def test_positional_argument_to_the_sink_and_through_star_args(check_speculator) -> None:  # type: ignore[no-untyped-def]
    # 0.28.0's sink: build_attn_metadata(attn_groups, num_reqs, num_tokens, ...); SG101 fires too (direct sink call)
    checked = check_speculator(
        """
        class DirectSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                return build_attn_metadata(self.attn_groups, num_reqs, batch_desc.num_tokens)  # sink

            def propose_star(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
                args = (num_reqs, num_reqs, batch_desc.num_tokens)
                return self._build_draft_attn_metadata(*args, seq_lens, 1)  # star
        """
    )
    assert [f.code for f in checked.at("# sink")] == ["SG101", "SG103"]
    (star,) = checked.at("# star")
    assert star.code == "SG103" and "(unpacked with `*`)" in star.message and "through `args`" in star.message
