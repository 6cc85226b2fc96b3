"""Issue #8: `flag = any(s.non_causal_multi_token_decode for s in specs)`, then `cls(..., <that flag>=flag)`."""

from __future__ import annotations

from merge_specs import check_merge, line_of


def test_any_through_a_local_is_flagged_at_the_constructor_argument() -> None:
    findings, text = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            flag = any(s.non_causal_multi_token_decode for s in specs)
            return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=flag)  # flagged
        """
    )
    (finding,) = findings
    assert finding.code == "SG201" and finding.line == line_of(text, "# flagged")
    assert finding.symbol == "MLAAttentionSpec.merge"
    assert f"with `any()` (through `flag` (line {line_of(text, 'flag = any')}))" in finding.message


def test_through_several_locals_a_kwargs_dict_and_an_attribute_store() -> None:
    findings, text = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            flags = [s.non_causal_multi_token_decode for s in specs]
            merged = any(flags)
            causal = not merged
            kwargs = {"block_size": specs[0].block_size, "non_causal_multi_token_decode": merged}
            spec = cls(**kwargs)  # kwargs
            object.__setattr__(spec, "unused", causal)
            spec.non_causal_multi_token_decode = merged  # store
            return spec
        """
    )
    # one finding per merge, where the merged flag was last written
    assert [(f.code, f.line) for f in findings] == [("SG201", line_of(text, "# store"))]


def test_a_reduction_over_some_other_attribute_is_not_the_flags_merge() -> None:
    findings, _ = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            assert all(s.non_causal_multi_token_decode == specs[0].non_causal_multi_token_decode for s in specs)
            block_size = max(s.block_size for s in specs)
            return cls(block_size=block_size, non_causal_multi_token_decode=specs[0].non_causal_multi_token_decode)
        """
    )
    assert findings == []


def test_the_first_layers_flag_for_the_group_is_a_merge_of_layers_that_disagree() -> None:
    findings, text = check_merge(
        """
        @classmethod
        def merge(cls, specs):
            first = specs[0]
            return cls(block_size=first.block_size, non_causal_multi_token_decode=first.non_causal_multi_token_decode)
        """
    )
    (finding,) = findings
    assert finding.code == "SG201" and "([True, False])" in finding.message and "=True" in finding.message
