"""Unknown stays unknown: a site the evaluator cannot decide is no finding, and `--statistics` / `-v` say how many
and why (issue #20), on a cold run and a warm one alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.rules.judging import BUDGET

# The mode is read through a function of an installed library the analyzer never reads: which branch runs
# cannot be decided, and only one of them passes the padded count.
UNREADABLE_MODE = """\
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
from torch.somewhere import mode_of


class MySpeculator(DraftModelSpeculator):
    def propose(self, batch_desc, num_reqs, num_tokens):
        if mode_of(batch_desc) == CUDAGraphMode.FULL:
            n = batch_desc.num_tokens
        else:
            n = num_tokens
        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
"""


def _long_function(statements: int) -> str:
    body = "\n".join(f"        m = m + xs[{i}] * 2" for i in range(statements))
    return (
        "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n\n\n"
        "class LongSpeculator(DraftModelSpeculator):\n"
        "    def propose(self, batch_desc, num_reqs, xs):\n"
        "        m = 0\n"
        f"{body}\n"
        "        n = batch_desc.num_tokens + m\n"
        "        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)\n"
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "spec.py").write_text(UNREADABLE_MODE)
    return tmp_path


def test_an_undecided_site_is_no_finding_and_is_silent_by_default(cli, tree: Path) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", "pkg", cwd=tree)
    assert (out.returncode, out.stdout, out.stderr) == (0, "All checks passed!\n", "")


@pytest.mark.parametrize("cache", [["--no-cache"], []], ids=["cold", "cold-then-warm"])
def test_statistics_counts_and_verbose_lists_why(cli, tree: Path, cache: list[str]) -> None:  # type: ignore[no-untyped-def]
    runs = 1 if cache else 2  # with the cache on, the second run reads the judgements back: they must say the same
    for _ in range(runs):
        stats = cli("check", "pkg", "--statistics", *cache, cwd=tree)
        assert stats.returncode == 0
        assert stats.stderr == "specguard: note: 1 site was not decided (SG103 1); -v lists them\n"
        verbose = cli("check", "pkg", "-v", *cache, cwd=tree)
        assert verbose.returncode == 0
        assert verbose.stderr.splitlines() == [
            "specguard: note: 1 site was not decided (SG103 1)",
            "specguard: not decided: pkg/spec.py:12: SG103 `MySpeculator.propose`: `num_tokens_padded=` of "
            "`_build_draft_attn_metadata`: depends on whether `mode_of(batch_desc) == CUDAGraphMode.FULL` "
            "(spec.py:8) is true",
        ]


def test_a_budget_is_a_reason_not_a_finding(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "spec.py").write_text(_long_function(BUDGET // 4))
    out = cli("check", "spec.py", "-v", "--no-cache", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "All checks passed!\n")
    # SG103 judges the count it hands the helper, SG105 the lengths: each runs the whole function
    assert out.stderr.splitlines()[-2:] == [
        f"specguard: not decided: spec.py:5: {code} `LongSpeculator.propose`: the function: "
        f"its evaluation ran out of budget ({BUDGET:,} steps)"
        for code in ("SG103", "SG105")
    ]


def test_the_same_function_within_budget_is_judged(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The budget case above is a budget, not something else the long function trips over."""
    (tmp_path / "spec.py").write_text(_long_function(20))
    out = cli("check", "spec.py", "-v", "--no-cache", cwd=tmp_path)
    assert out.returncode == 1 and "SG103 `LongSpeculator.propose` passes `batch_desc.num_tokens`" in out.stdout
    assert out.stderr == ""
