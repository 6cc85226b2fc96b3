"""CONTRIBUTING.md's e2e section quotes real server lines and lists the e2e servers: the lines must still be what
the e2e tests parse, and the table must name the servers the tier starts (no server needed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from e2e_server import guard_lines
from scenarios import COUNTER_LINE, G0_MESSAGE, SCENARIOS, STARTUP_PID

CONTRIBUTING = Path(__file__).resolve().parents[2] / "CONTRIBUTING.md"


def e2e_section() -> str:
    text = CONTRIBUTING.read_text()
    start = text.index("\n## The end-to-end tier: real servers\n")
    return text[start : text.index("\n## ", start + 1)]


def test_quoted_startup_counter_and_violation_lines_parse() -> None:
    lines = e2e_section().splitlines()
    startup = [m for m in map(STARTUP_PID.search, lines) if m]
    assert startup and all(m["mode"] == "raise" for m in startup)
    counters = [m for m in map(COUNTER_LINE.search, lines) if m]
    assert counters
    for m in counters:
        snapshot = json.loads(m["json"])
        assert any(k.startswith("G0:") and k.endswith("(target)") for k in snapshot["checks_run"])
        assert any(k.startswith("G0:") and k.endswith("(draft)") for k in snapshot["checks_run"])
    violations = [m.group(0) for m in map(G0_MESSAGE.search, lines) if m]
    assert violations and all("SG103 padded-token-count" in v for v in violations)
    assert len(guard_lines("\n".join(lines))) >= 3


def test_the_server_table_names_every_scenario() -> None:
    rows = re.findall(r"^\| `(\w+)` \|", e2e_section(), flags=re.MULTILINE)
    assert rows == list(SCENARIOS)


def test_guard_lines_are_told_from_paths() -> None:
    log = "\n".join(
        [
            "/root/.cache/specguard/venv-e2e/lib/python3.11/site-packages/vllm/x.py:24: DeprecationWarning: ...",
            "(Worker pid=1) INFO 11-30 15:26:33 [__init__.py:79] e2e-fault-plugin probe (pid 1): specguard modules",
            "INFO 11-30 15:29:44 [specguard] specguard runtime guard (VLLM_SPECGUARD mode=raise, pid 8713) for ...",
            "(Worker pid=1) ERROR [x.py:1] specguard.runtime.errors.SpecGuardViolation: [specguard G0 ...",
        ]
    )
    assert guard_lines(log) == log.splitlines()[2:]
