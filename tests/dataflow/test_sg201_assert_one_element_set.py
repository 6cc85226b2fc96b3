"""Issue #8, acceptance: a merge that asserts a one-element set of the flags and pops it is not flagged."""

from __future__ import annotations

from merge_specs import check_merge


def test_assert_one_element_set_then_pop() -> None:
    findings, _ = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            flags = {spec.non_causal_multi_token_decode for spec in specs}
            assert len(flags) == 1, "one KV-cache group must not mix causal and non-causal layers"
            return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=flags.pop())
        """
    )
    assert findings == []


def test_assert_one_element_then_a_reduction_is_harmless() -> None:
    findings, _ = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            assert 1 == len(set(s.non_causal_multi_token_decode for s in specs))
            return cls(block_size=1, non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))
        """
    )
    assert findings == []


def test_an_assert_after_the_merged_spec_is_built_still_fails_a_mixed_group() -> None:
    """What counts is whether the merge returns for layers that disagree, not where the check is written."""
    findings, _ = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            flag = any(s.non_causal_multi_token_decode for s in specs)
            merged = cls(block_size=1, non_causal_multi_token_decode=flag)
            assert len({s.non_causal_multi_token_decode for s in specs}) == 1
            return merged
        """
    )
    assert findings == []


def test_an_assert_after_the_return_checks_nothing() -> None:
    findings, _ = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            flag = any(s.non_causal_multi_token_decode for s in specs)
            merged = cls(block_size=1, non_causal_multi_token_decode=flag)
            if merged.block_size:
                return merged
            assert len({s.non_causal_multi_token_decode for s in specs}) == 1
            return merged
        """
    )
    assert [f.code for f in findings] == ["SG201"]


def test_the_assert_must_be_about_the_flag() -> None:
    findings, _ = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            assert len({s.block_size for s in specs}) == 1
            return cls(block_size=1, non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))
        """
    )
    assert [f.code for f in findings] == ["SG201"]
