"""The runtime guard inside SGLang 0.5.23's own code: loaded by SGLang's plugin loader from the `sglang.srt.plugins`
entry point (SGLANG_SPECGUARD, SGLANG_PLUGINS), G6 hooked through SGLang's HookRegistry on real ForwardBatch
objects and SGLang's own AttentionBackend.forward, G1 on FlashInfer's real prefill wrapper planned by SGLang's
real per-instance `fast_prefill_plan`.

The cases under cases/ were written beside the code (the blind sets are test_blind_sglang_guard.py's). Each
SGLang process runs every case once; the three modes run the same cases, so warn mode and an unset variable can
be compared with what raise mode stops."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sglang_env import HERE, run_driver

CASES = sorted((HERE / "cases").glob("*.py"))
INSTALLED = [
    "G6@ForwardBatch.needs_forward_metadata_init->AttentionBackend.forward (HookRegistry)",
    "G1@fast_prefill_plan",
    "G1@BatchPrefillWithPagedKVCacheWrapper.plan/run",
    "G1@BatchPrefillWithRaggedKVCacheWrapper.plan/run",
    "G1@BatchDecodeWithPagedKVCacheWrapper.plan/run",
    "G1@fast_decode_plan",
]
LIGHT = ["specguard", "specguard.runtime", "specguard.runtime.errors", "specguard.runtime.policy"]


def label(path: Path) -> str:
    """A case's EXPECT, read without importing it (it imports SGLang)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["EXPECT"]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} has no EXPECT")


@pytest.fixture(scope="module")
def raised() -> dict:
    return run_driver(CASES, "raise")


@pytest.fixture(scope="module")
def warned() -> dict:
    return run_driver(CASES, "warn")


@pytest.fixture(scope="module")
def unguarded() -> dict:
    return run_driver(CASES, None)


def test_cases_are_both_kinds() -> None:
    labels = [label(p) for p in CASES]
    assert labels.count("caught") >= 4 and labels.count("passes") >= 5, labels


def test_sglang_plugin_loader_installs_every_check(raised) -> None:
    assert raised["installed"] == INSTALLED
    assert raised["skipped"] == []
    lines = [x for x in raised["log"].splitlines() if "specguard runtime guard (SGLANG_SPECGUARD mode=raise" in x]
    assert len(lines) == 1, raised["log"][-3000:]
    assert " for SGLang 0.5.23, flashinfer-python " in lines[0]
    assert "on SGLang 0.5.23 every installed check is live" in lines[0]


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_raise_mode_stops_exactly_the_stale_plans(raised, case) -> None:
    result = raised["results"][case.stem]
    assert result["outcome"] == label(case), result
    if result["outcome"] == "caught":
        assert result["check"] in ("G6", "G1")
        if result["check"] == "G6":
            assert (
                "[specguard G6 pre-planned metadata vs the batch] AttentionBackend.forward after "
                "ForwardBatch.needs_forward_metadata_init" in result["message"]
            )
            assert "the forward was told not to plan again and no backend planned it since" in result["message"]
            assert "Static rule that finds it: SG106 plan-before-padding" in result["message"]


def test_reproduced_eagle_pre_pad_plan_is_named(raised) -> None:
    msg = raised["results"]["eagle_draft_extend_padded"]["message"]
    assert "ForwardBatch (DRAFT_EXTEND_V2)" in msg
    assert "planned for 2 requests and 6 tokens" in msg and "while the batch has 4 requests and 12 tokens" in msg
    assert "padded after its metadata was planned and marked ready" in msg


def test_warn_mode_counts_and_changes_no_answer(warned, unguarded) -> None:
    """warn lets every case run on with the results SGLang gives without the guard (the forward's decision, the
    kernels reached, FlashInfer's own refusal of a prefill run with more rows than planned), and counts each
    stale plan once."""
    assert warned["results"] == unguarded["results"]
    assert unguarded["results"]["fast_prefill_plan_padded_rows"]["message"].startswith(
        "ValueError: q.shape[0] (12) does not match qo_indptr[-1] (9)"
    )
    caught = [p.stem for p in CASES if label(p) == "caught"]
    assert sum(warned["stats"]["violations"].values()) == len(caught)
    assert warned["stats"]["guard_errors"] == {}


def test_unset_installs_nothing_and_imports_nothing_heavy(unguarded) -> None:
    assert unguarded["installed"] == [] and unguarded["skipped"] == []
    assert unguarded["specguard_modules"] == LIGHT


def test_sglang_plugins_selects_the_plugin_by_name() -> None:
    one = CASES[:1]
    assert run_driver(one, "raise", SGLANG_PLUGINS="specguard")["installed"] == INSTALLED
    assert run_driver(one, "raise", SGLANG_PLUGINS="another_plugin")["installed"] == []


def test_a_bad_value_is_one_error_line_and_no_guard() -> None:
    report = run_driver(CASES[:1], "bogus")
    assert report["installed"] == []
    errors = [x for x in report["log"].splitlines() if "specguard runtime guard not installed" in x]
    assert errors == [
        "specguard runtime guard not installed: SGLANG_SPECGUARD='bogus' is not a valid value; use one of: unset, "
        "'0', 'off', '1', 'raise', 'warn'"
    ], report["log"][-2000:]
    assert "Traceback" not in report["log"]
