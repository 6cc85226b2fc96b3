"""A merge that hands its specs to a function the evaluation cannot read: that function may be the check that fails
a mixed group, so the merge is not decided (unknown stays unknown), while a helper it can read is evaluated."""

from __future__ import annotations

import textwrap
from pathlib import Path

from merge_specs import check_merge

MERGE = textwrap.dedent("""
    from dataclasses import dataclass

    from myfork.checks import check_group


    @dataclass
    class MLAAttentionSpec:
        non_causal_multi_token_decode: bool = False

        @classmethod
        def merge(cls, specs):
            check_group(specs)
            return cls(non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))
""")


def test_specs_handed_to_an_unreadable_function_leave_the_merge_undecided(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "spec.py").write_text(MERGE)
    out = cli("check", "spec.py", "-v", "--no-cache", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "All checks passed!\n")
    assert out.stderr.splitlines() == [
        "specguard: note: 1 site was not decided (SG201 1)",
        "specguard: not decided: spec.py:12: SG201 `MLAAttentionSpec.merge`: `MLAAttentionSpec.merge`: depends on "
        "whether `check_group(specs)` (spec.py:13) returns",
    ]


def test_a_readable_helper_is_evaluated_whether_it_checks_or_not() -> None:
    checks, _ = check_merge(
        """
        @staticmethod
        def _check_group(specs):
            if len({s.non_causal_multi_token_decode for s in specs}) > 1:
                raise ValueError("mixed causality")

        @classmethod
        def merge(cls, specs):
            cls._check_group(specs)
            return cls(block_size=1, non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))
        """
    )
    assert checks == []
    logs, _ = check_merge(
        """
        @staticmethod
        def _log_group(specs):
            print(len(specs), "layers")

        @classmethod
        def merge(cls, specs):
            cls._log_group(specs)
            return cls(block_size=1, non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))
        """
    )
    assert [f.code for f in logs] == ["SG201"]
