"""Mode parsing and the raise/warn policy, without vLLM."""

from __future__ import annotations

import logging

import pytest

from specguard.runtime import invariants as inv
from specguard.runtime.errors import SpecGuardViolation
from specguard.runtime.patching import Skip, run_check
from specguard.runtime.policy import Policy, SpecGuardConfigError, parse_mode


@pytest.mark.parametrize("value", [None, "", "0", "off", "OFF", " off "])
def test_off_values(value) -> None:
    assert parse_mode(value) == "off"


@pytest.mark.parametrize("value, mode", [("1", "raise"), ("raise", "raise"), ("warn", "warn"), ("WARN", "warn")])
def test_on_values(value, mode) -> None:
    assert parse_mode(value) == mode


def test_unknown_value_lists_valid_ones() -> None:
    with pytest.raises(SpecGuardConfigError) as err:
        parse_mode("yes")
    msg = str(err.value)
    for valid in ("unset", "'0'", "'off'", "'1'", "'raise'", "'warn'"):
        assert valid in msg


def _violation(site: str = "s"):
    return inv.check_prefill_rows(52, 48, site=site, subject="w")


def test_raise_mode_raises_and_counts() -> None:
    policy = Policy(mode="raise")
    with pytest.raises(SpecGuardViolation):
        policy.report(_violation())
    assert policy.violations[("G1", "s")] == 1


def test_warn_mode_logs_once_per_site_and_counts(caplog) -> None:
    policy = Policy(mode="warn", logger=logging.getLogger("sg-test"))
    with caplog.at_level(logging.WARNING, logger="sg-test"):
        for _ in range(3):
            policy.report(_violation("a"))
        policy.report(_violation("b"))
    assert policy.violations[("G1", "a")] == 3 and policy.violations[("G1", "b")] == 1
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert any("[specguard G1 tokens vs query layout] a (w)" in line for line in lines)
    assert any("[specguard G1 tokens vs query layout] b (w)" in line for line in lines)


def test_run_check_counts_skips_and_guard_errors(monkeypatch) -> None:
    from specguard.runtime import patching

    policy = Policy(mode="raise", logger=logging.getLogger("sg-test"))
    monkeypatch.setattr(patching, "POLICY", policy)

    def skipper():
        raise Skip("no host value")

    def buggy():
        raise KeyError("surprise")

    x, y, z = policy.site("G1", "x"), policy.site("G2", "y"), policy.site("G1", "z")
    run_check(x, skipper)
    run_check(x, skipper)
    run_check(y, buggy)  # the guard's own bug: counted, never raised
    assert policy.skips[("G1", "x", "no host value")] == 2
    assert policy.guard_errors[("G2", "y")] == 1
    with pytest.raises(SpecGuardViolation):
        run_check(z, _violation)
    assert policy.snapshot()["checks_run"] == {"G1:x": 2, "G1:z": 1, "G2:y": 1}


def test_messages_name_each_static_rule_as_the_analyzer_does() -> None:
    """A violation names the rules that find its cause by code and name; the name is the rule's own, which
    `specguard explain NAME` takes (the guard keeps its own map so serving never imports the analyzer)."""
    from specguard.rules import all_rules
    from specguard.runtime.errors import RULE_NAMES

    rules = all_rules()
    assert {code: rules[code].name for code in RULE_NAMES} == RULE_NAMES
