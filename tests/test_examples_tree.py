"""The shipped examples/ tree, a fork of vLLM, shows every rule for vLLM's code firing, once each (it is what the
Quickstart runs). SGLang's rules show themselves in their own examples (`specguard explain`), run as tests."""

from __future__ import annotations

from pathlib import Path

from specguard.composition import check_paths
from specguard.rules import ALL_CODES, load_rule

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_every_rule_for_vllm_fires_exactly_once_on_the_examples() -> None:
    result = check_paths([EXAMPLES], use_cache=False)
    assert result.errors == []
    assert sorted(f.code for f in result.findings) == sorted(c for c in ALL_CODES if load_rule(c).framework == "vllm")


def test_each_finding_sits_under_the_comment_that_announces_it() -> None:
    for finding in check_paths([EXAMPLES], use_cache=False).findings:
        lines = Path(finding.path).read_text().splitlines()
        before = "\n".join(lines[max(0, finding.line - 4) : finding.line])
        assert f"# {finding.code}:" in before, (finding.code, finding.path, finding.line)
