"""Every rule's own bad and good examples are its first tests (as fixit does): bad fires, good stays quiet, and
a rule that offers a fix turns its bad example into its documented `fixed` one."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source
from specguard.fixes.apply import fix_text
from specguard.rules import ALL_CODES, all_rules, rule_name

RULES = all_rules()


def test_every_rule_module_declares_the_code_in_its_file_name() -> None:
    assert set(RULES) == set(ALL_CODES)
    for code, rule in RULES.items():
        assert rule.code == code
        assert rule.name and rule.summary and rule.why and rule.bad.strip() and rule.good.strip()
        assert rule_name(code) == rule.name  # what JSON output reads without importing the rule


def fixed_by_specguard(text: str) -> str:
    """`text` after every fix the rules offer, unsafe ones included, through the same fixer as `--fix`."""
    return fix_text(text, check_source(text), check_source, lambda f: True).text


@pytest.mark.parametrize("code", ALL_CODES)
def test_a_rules_fix_turns_its_bad_example_into_the_documented_fixed_one(code: str) -> None:
    rule, bad = RULES[code], textwrap.dedent(RULES[code].bad)
    findings = check_source(bad)
    if rule.fix_availability == "never":
        assert all(f.fix is None for f in findings) and rule.fixed == ""
        return
    assert any(f.fix is not None for f in findings) and all(f.fix.message for f in findings if f.fix)
    after = fixed_by_specguard(bad)
    assert after == textwrap.dedent(rule.fixed), after
    # what had a fix is gone; what had none is still reported
    assert len(check_source(after)) == len([f for f in findings if f.fix is None])
    assert fixed_by_specguard(after) == after  # a second pass changes nothing
    compile(after, "fixed.py", "exec")


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("code", [c for c in ALL_CODES if RULES[c].fix_availability != "never"])
def test_a_rules_fix_is_the_same_in_a_file_without_a_final_newline(code: str, newline: str) -> None:
    """Issue 16 item 9: the last definition of a file that ends without a newline got no fix (SG102's override
    is usually the last thing in its file). The file keeps its missing final newline and its line endings."""
    bad = textwrap.dedent(RULES[code].bad).rstrip("\n").replace("\n", newline)
    expected = textwrap.dedent(RULES[code].fixed).rstrip("\n").replace("\n", newline)
    assert [f.fix is not None for f in check_source(bad)] == [
        f.fix is not None for f in check_source(textwrap.dedent(RULES[code].bad))
    ]
    assert fixed_by_specguard(bad) == expected


@pytest.mark.parametrize("code", [c for c in ALL_CODES if RULES[c].fix_availability != "never"])
def test_docs_say_what_the_fix_does_and_show_the_fixed_example(code: str) -> None:
    docs = RULES[code].docs()
    assert f"Fix is {RULES[code].fix_availability} available." in docs
    assert "## Fix" in docs and textwrap.dedent(RULES[code].fixed).strip() in docs
    summary = RULES[code].fix_summary
    assert "Unsafe" in summary or "Safe" in summary  # how safe, and why: "safe means no change on healthy input"
    assert "because" in summary or "since" in summary


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


def test_the_rules_on_the_evaluator_are_the_ones_the_engine_loads_in_its_main_process() -> None:
    from specguard.rules import EVALUATED, JUDGED_TOO

    assert {code for code, rule in RULES.items() if rule.judge is not None} == EVALUATED | JUDGED_TOO
    assert all(RULES[code].judges is not None or RULES[code].applies for code in JUDGED_TOO)


@pytest.mark.parametrize("code", ALL_CODES)
def test_a_limits_example_is_code_the_rule_misses(code: str) -> None:
    """Each rule says what it cannot see and where the pattern comes from; a limit's example is code of the kind the
    rule means that it does not flag, so the sentence has to go when the rule learns to see it."""
    rule = RULES[code]
    assert rule.limits and rule.references
    for limit in rule.limits:
        if limit.missed:
            text = textwrap.dedent(limit.missed)
            compile(text, "missed.py", "exec")
            assert [f for f in check_source(text) if f.code == code] == [], limit.text


def test_framework_rules_list_each_rule_of_a_non_base_pack() -> None:
    """A rule runs only where its built-in pack is read (rules.FRAMEWORK_RULES, read before any rule is loaded);
    that table and each rule's own `framework` say the same."""
    from specguard.rules import ALL_CODES, FRAMEWORK_RULES, load_rule

    declared = {code: pack for pack, codes in FRAMEWORK_RULES.items() for code in codes}
    assert {code: load_rule(code).framework for code in ALL_CODES} == {
        code: declared.get(code, "vllm") for code in ALL_CODES
    }
