"""Issue 18 items 4 and 5, in the guard's own process: warn mode logs each new kind of violation at a site
(what differs, not the numbers), counts every one, and still stops what would touch memory outside its
buffers; on a vLLM release or a flashinfer-python release outside the assessed table (coverage.ASSESSED), raise
mode runs as warn and the startup line says why. Driven through vLLM 0.33.0's real CPU attention builder."""

from __future__ import annotations

import logging

import pytest
import torch
from sg_runtime_helpers import common_metadata as _cm

from specguard.runtime import SpecGuardViolation, stats
from specguard.runtime.policy import MAX_KINDS_LOGGED, POLICY

SITE = "G0:CPUAttentionMetadataBuilder.build(target)"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lines():
    handler = Lines()
    logger = POLICY._log()
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


def _padded(q_lens: list[int], pad: int = 4):
    return _cm(q_lens, num_actual_tokens=sum(q_lens) + pad)


def test_each_new_kind_at_a_site_is_logged_once_and_every_one_counted(cpu_builder, guard, lines) -> None:
    guard("warn")
    builder = cpu_builder()
    for q_lens in ([4] * 12, [4] * 3, [2, 7]):  # the same kind with other numbers: one line
        builder.build(0, _padded(q_lens))
    shifted = torch.tensor([1, 3, 5, 7], dtype=torch.int32)  # another kind: requests start one token late
    builder.build(0, _cm([2, 2, 2], query_start_loc_cpu=shifted, query_start_loc=shifted.clone(), num_actual_tokens=7))
    builder.build(0, _padded([3, 3], pad=1))  # the first kind again
    warned = [x for x in lines if "[specguard G0" in x]
    assert len(warned) == 2, warned
    assert "(48) != num_actual_tokens (52)" in warned[0] and "warn mode: proceeds" in warned[0]
    assert "query_start_loc_cpu starts at 1, not 0" in warned[1]
    assert stats()["violations"] == {SITE: 5}
    assert len(builder.seen) == 5  # warn mode: vLLM built every one


def test_warn_mode_stops_what_would_touch_memory_outside_its_buffers(cpu_builder, guard, lines) -> None:
    guard("warn")
    builder = cpu_builder()
    builder.build(0, _padded([4, 4]))  # a padded count: the backend reads within its buffers
    for cm, what in (
        (_cm([4, 4], num_actual_tokens=6), "(8) != num_actual_tokens (6)"),  # a count smaller than real
        (_cm([4, 4], slot_mapping=torch.zeros(7, dtype=torch.int64)), "slot_mapping has 7 rows"),
        (_cm([4, 4], block_table_tensor=torch.zeros(1, 8, dtype=torch.int32)), "block_table_tensor has 1 rows"),
    ):
        with pytest.raises(SpecGuardViolation, match="Stopped although the guard runs in warn mode") as err:
            builder.build(0, cm)
        assert what in str(err.value)
        assert any(what in x and "Stopped although" in x for x in lines)
    assert len(builder.seen) == 1
    assert stats()["violations"] == {SITE: 4}


def test_a_flood_of_kinds_is_counted_not_logged(guard, lines) -> None:
    from specguard.runtime import invariants as inv

    guard("warn")
    for i in range(MAX_KINDS_LOGGED + 5):  # q rows above the plan: not out of bounds, each a new G1 kind
        POLICY.report(
            inv.check_decode_rows(2 * (i + 2), 2, 1, exact=False, site=f"s{i % 1}", subject="w")
            or inv.check_prefill_rows(9, 4, site="s0", subject=f"w{i}")
        )
    assert 1 <= len([x for x in lines if "[specguard G1" in x]) <= MAX_KINDS_LOGGED


def test_an_unassessed_vllm_runs_raise_as_warn_and_says_why(cpu_builder, guard, monkeypatch, lines) -> None:
    from specguard.runtime import install

    real = install._detect_versions
    monkeypatch.setattr(install, "_detect_versions", lambda framework: {**real(framework), "vllm": "0.99.0"})
    guard("raise")
    assert POLICY.mode == "warn" and stats()["mode"] == "warn"
    startup = install.startup_line(POLICY.mode)
    assert (
        startup.startswith("specguard runtime guard (VLLM_SPECGUARD mode=warn, pid ")
        and "(asked for raise; vLLM 0.99.0 is outside the releases this guard was assessed on (0.28-0.33)" in startup
    )
    builder = cpu_builder()
    builder.build(0, _padded([4, 4]))  # logged and counted, not raised
    with pytest.raises(SpecGuardViolation, match="Stopped although"):
        builder.build(0, _cm([4, 4], num_actual_tokens=6))
    assert stats()["violations"] == {SITE: 2}


def test_an_assessed_vllm_keeps_raise(guard, lines) -> None:
    guard("raise")
    assert POLICY.mode == "raise" and POLICY.mode_reason == ""


def test_an_unassessed_flashinfer_runs_raise_as_warn_and_says_why(cpu_builder, guard, monkeypatch, lines) -> None:
    from specguard.runtime import install

    real = install._detect_versions
    monkeypatch.setattr(
        install, "_detect_versions", lambda framework: {**real(framework), "flashinfer-python": "0.7.9"}
    )
    guard("raise")
    assert POLICY.mode == "warn" and stats()["mode"] == "warn"
    startup = install.startup_line(POLICY.mode)
    assert startup.startswith("specguard runtime guard (VLLM_SPECGUARD mode=warn, pid ") and (
        "(asked for raise; flashinfer-python 0.7.9 is outside the releases this guard was assessed on "
        "(0.7.2.post1, 0.7.4), so violations are logged and counted, not raised, except those that would touch "
        "memory outside their buffers) for vLLM 0.33.0, "
        "flashinfer-python 0.7.9 (not assessed: the table covers 0.7.2.post1, 0.7.4): installed [" in startup
    )
    builder = cpu_builder()
    builder.build(0, _padded([4, 4]))  # logged and counted, not raised
    with pytest.raises(SpecGuardViolation, match="Stopped although"):
        builder.build(0, _cm([4, 4], num_actual_tokens=6))
    assert stats()["violations"] == {SITE: 2}


@pytest.mark.parametrize(
    "versions, reason",
    [
        ({"vllm": "0.33.0", "flashinfer-python": "0.7.2.post1"}, ""),
        ({"vllm": "0.33.0", "flashinfer-python": "0.7.4"}, ""),
        ({"vllm": "0.32.0+cpu", "flashinfer-python": "not installed"}, ""),  # vLLM's CPU build: no FlashInfer check
        (
            {"vllm": "0.34.0", "flashinfer-python": "0.8.0"},
            "asked for raise; vLLM 0.34.0 is outside the releases this guard was assessed on (0.28-0.33) and "
            "flashinfer-python 0.8.0 is outside the releases this guard was assessed on (0.7.2.post1, 0.7.4), so",
        ),
    ],
)
def test_the_mode_follows_both_versions(versions, reason) -> None:
    from specguard.runtime.install import effective_mode

    mode, why = effective_mode("raise", versions)
    assert (mode, why[: len(reason)]) == ("warn" if reason else "raise", reason)
    assert effective_mode("warn", versions) == ("warn", "")
