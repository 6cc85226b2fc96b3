"""Issue #8: `non_causal_multi_token_decode=max(flags)`, and the other reductions and folds: each merges a group
whose layers disagree, and the message says what the merged flag became."""

from __future__ import annotations

import pytest
from merge_specs import check_merge, line_of


@pytest.mark.parametrize(
    ("merged", "shown", "meaning"),
    [
        ("max(flags)", "`max()`", "most permissive"),
        ("min(flags)", "`min()`", "least permissive"),
        ("all(flags)", "`all()`", "least permissive"),
        ("bool(sum(flags))", "`sum()`", "most permissive"),
        ("functools.reduce(lambda a, b: a or b, flags)", "`reduce()`", "most permissive"),
    ],
)
def test_reductions_of_a_list_of_flags(merged: str, shown: str, meaning: str) -> None:
    findings, text = check_merge(
        f"""
        @classmethod
        def merge(cls, specs):
            flags = [s.non_causal_multi_token_decode for s in specs]
            return cls(block_size=specs[0].block_size, non_causal_multi_token_decode={merged})  # flagged
        """
    )
    (finding,) = findings
    assert finding.code == "SG201" and finding.line == line_of(text, "# flagged")
    assert f"with {shown}" in finding.message and meaning in finding.message


@pytest.mark.parametrize(
    "fold", ["flag = flag or spec.non_causal_multi_token_decode", "flag |= spec.non_causal_multi_token_decode"]
)
def test_an_or_fold_over_a_loop(fold: str) -> None:
    findings, text = check_merge(
        f"""
        @classmethod
        def merge(cls, specs):
            flag = False
            for spec in specs:
                {fold}
            return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=flag)  # flagged
        """
    )
    (finding,) = findings
    assert finding.line == line_of(text, "# flagged") and "most permissive" in finding.message
