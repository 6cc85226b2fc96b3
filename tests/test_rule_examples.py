"""Every rule's own bad and good examples are its first tests (as fixit does): bad fires, good stays quiet."""

from __future__ import annotations

import textwrap

import pytest

from specguard.analysis.engine import check_source
from specguard.rules import ALL_CODES, all_rules

RULES = all_rules()


def test_every_rule_module_declares_the_code_in_its_file_name() -> None:
    assert set(RULES) == set(ALL_CODES)
    for code, rule in RULES.items():
        assert rule.code == code
        assert rule.name and rule.summary and rule.why and rule.bad.strip() and rule.good.strip()


@pytest.mark.parametrize("code", ALL_CODES)
def test_bad_example_fires_its_rule(code: str) -> None:
    """Once, or, where the example shows several shapes, on each line marked `# CODE` and nowhere else."""
    text = textwrap.dedent(RULES[code].bad)
    marked = {n for n, line in enumerate(text.splitlines(), 1) if f"# {code}" in line}
    findings = check_source(text)
    assert [f.code for f in findings] == [code] * max(1, len(marked)), findings
    if marked:
        assert {f.line for f in findings} == marked, findings


@pytest.mark.parametrize("code", ALL_CODES)
def test_good_example_is_clean(code: str) -> None:
    assert check_source(textwrap.dedent(RULES[code].good)) == []


@pytest.mark.parametrize("code", ALL_CODES)
def test_explain_prints_the_docs(code: str, cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("explain", code.lower())
    assert out.returncode == 0
    assert f"({code})" in out.stdout and "## Why is this bad?" in out.stdout
    assert textwrap.dedent(RULES[code].bad).strip().splitlines()[0] in out.stdout
