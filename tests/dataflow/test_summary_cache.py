"""Summaries are computed once and kept with the file's scan; a change in the helper's file reaches the result."""

from __future__ import annotations

import textwrap
from pathlib import Path

from specguard.composition import check_paths
from specguard.settings import Settings

DRAFTER = """
from fork.counts import tokens_for
from fork.spec.speculator import DraftModelSpeculator


class CountingSpeculator(DraftModelSpeculator):
    def propose(self, num_reqs, batch_desc):
        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=tokens_for(batch_desc))
"""
BASE = """
class DraftModelSpeculator:
    def _build_draft_attn_metadata(self, num_reqs, num_tokens_padded):
        pass
"""
PADDED = "def tokens_for(desc):\n    return desc.num_tokens\n"
REAL = "def tokens_for(desc):\n    return desc.real_tokens\n"


def test_warm_runs_reuse_summaries_and_see_a_changed_helper(tmp_path: Path) -> None:
    for rel, text in {
        "fork/__init__.py": "",
        "fork/spec/__init__.py": "",
        "fork/spec/speculator.py": BASE,
        "fork/drafter.py": textwrap.dedent(DRAFTER),
        "fork/counts.py": PADDED,
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    settings = Settings(cache_dir=tmp_path / "cache", root=tmp_path)

    def codes() -> list[str]:
        result = check_paths([tmp_path / "fork"], settings)
        assert result.errors == []
        return [f.code for f in result.findings]

    assert codes() == ["SG103"]
    assert codes() == ["SG103"]  # warm: results and summaries from the cache
    counts = tmp_path / "fork" / "counts.py"
    counts.write_text(REAL)  # the helper now returns the real count: the drafter's result must change
    assert codes() == []
    counts.write_text(PADDED + "\n")
    assert codes() == ["SG103"]
