"""Issue #8, acceptance: a merge that raises when the specs disagree is not flagged."""

from __future__ import annotations

from merge_specs import check_merge


def test_each_spec_compared_with_the_first_raises_then_any() -> None:
    findings, _ = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            first = specs[0].non_causal_multi_token_decode
            for spec in specs[1:]:
                if spec.non_causal_multi_token_decode != first:
                    raise ValueError("one KV-cache group must not mix causal and non-causal layers")
            return cls(
                block_size=specs[0].block_size,
                non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs),
            )
        """
    )
    assert findings == []


def test_all_equal_to_the_first_or_a_set_larger_than_one_raises() -> None:
    findings, _ = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            if not all(s.non_causal_multi_token_decode == specs[0].non_causal_multi_token_decode for s in specs):
                raise ValueError("mixed causality")
            return cls(block_size=1, non_causal_multi_token_decode=max(s.non_causal_multi_token_decode for s in specs))

        @classmethod
        def merge_checked(cls, specs):
            if len({s.non_causal_multi_token_decode for s in specs}) > 1:
                raise ValueError("mixed causality")
            return cls(block_size=1, non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))
        """
    )
    assert findings == []


def test_a_check_that_does_not_stop_the_merge_clears_nothing() -> None:
    findings, _ = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            first = specs[0].non_causal_multi_token_decode
            for spec in specs[1:]:
                if spec.non_causal_multi_token_decode != first:
                    print("mixed causality")  # logged, not refused
            return cls(block_size=1, non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))
        """
    )
    assert [f.code for f in findings] == ["SG201"]
