"""One source for the analyzer's benchmark figures: every number the README, docs/check.md and docs/benchmarks.md
quote about `specguard check`'s speed is a figure of a run benchmarks/results.json records (or a target the script
judges against), at the precision the page shows; benchmarks.md's tables are the run they name, cell by cell (the
whole-number MB and findings too); the README and check.md quote the latest run. The writer the script records with
is exercised on a tiny fake run. tests/test_bench_figures.py does the same for the other benchmarks."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))  # the scripts import their writer as a sibling module

import analyzer_vs_peers  # noqa: E402
import results  # noqa: E402

RUNS = {k: v for k, v in results.load().items() if k.startswith("analyzer/")}
LATEST = RUNS[max(RUNS)]
SGLANG_RUNS = {k: v for k, v in results.load().items() if k.startswith("analyzer-sglang/")}
SGLANG_LATEST = SGLANG_RUNS[max(SGLANG_RUNS)]
# A decimal that is not part of a version or a date (0.33.0, 2026-12-03 05:46), or a whole number given as a ratio.
FIGURE = re.compile(r"(?<![\d.:-])(\d+\.\d+|\d+(?=x\b| times\b))(?!\d|\.\d|:)")


def _region(page: str, start: str, end: str | None) -> str:
    text = (REPO / page).read_text(encoding="utf-8")
    begin = text.index(start)
    return text[begin : text.index(end, begin) if end else None]


REGIONS = {
    "README.md": _region("README.md", "On vLLM 0.28.0 (before both upstream fixes)", "\n## "),
    "docs/check.md": _region("docs/check.md", "On the full vLLM 0.33.0 tree (3,231 files)", None),
    "docs/benchmarks.md": _region("docs/benchmarks.md", "## `specguard check` against", "\n## The runtime guard"),
    "docs/sglang.md": _region("docs/sglang.md", "Speed: on SGLang", "\n## "),
}


KNOWN = results.numbers_in(RUNS) + results.numbers_in(SGLANG_RUNS)
KNOWN += [bound for *_, bound in analyzer_vs_peers.TARGETS.values()]


@pytest.mark.parametrize("page", sorted(REGIONS))
def test_every_figure_a_page_quotes_is_a_recorded_run(page: str) -> None:
    figures = FIGURE.findall(REGIONS[page])
    assert figures, f"{page}: no figure found where the benchmark is quoted"
    strays = [f for f in figures if not any(results.shown_as(v, f) for v in KNOWN)]
    assert strays == [], f"{page} quotes figures benchmarks/results.json does not hold: {strays}"


@pytest.mark.parametrize("page", ["README.md", "docs/check.md"])
def test_the_readme_and_check_md_quote_the_latest_run(page: str) -> None:
    text = " ".join(REGIONS[page].split())
    cold = f"{LATEST['ratios']['specguard cold / ruff']:.2f} times"
    warm = f"{LATEST['ratios']['specguard warm / ruff']:.2f} times"
    assert cold in text and warm in text, (page, cold, warm)
    when = datetime.fromisoformat(LATEST["date"]).strftime("%Y-%m-%d %H:%M")
    assert when in text


@pytest.mark.parametrize("page", ["README.md", "docs/sglang.md"])
def test_the_readme_and_sglang_md_quote_the_latest_sglang_run(page: str) -> None:
    text = " ".join(REGIONS[page].split())
    for ratio in ("specguard cold / ruff", "specguard warm / ruff"):
        assert f"{SGLANG_LATEST['ratios'][ratio]:.2f} times" in text, (page, ratio)
    assert datetime.fromisoformat(SGLANG_LATEST["date"]).strftime("%Y-%m-%d %H:%M") in text


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header row starts with `header`, each a list of its cells."""
    lines = text[text.index(header) :].splitlines()[2:]  # past the header and the separator row
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in lines[: next(i for i, x in enumerate(lines) if not x.startswith("|"))]
    ]


# The rows of benchmarks.md's table, by how their first cell starts, and the tool each is in the run.
TOOLS = {
    "ruff": "ruff",
    "specguard cold": "specguard-cold",
    "specguard warm": "specguard-warm",
    "fixit": "fixit",
    "semgrep": "semgrep",
}


def test_benchmarks_md_tables_are_the_run_they_name_cell_by_cell() -> None:
    """Every cell, whole numbers (MB, findings) too, is that run's figure as the page shows it."""
    text = REGIONS["docs/benchmarks.md"]
    m = re.search(r"One run, (\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}) UTC, ([\d,]+) files \((\d+) MB\)", text)
    assert m, "benchmarks.md's table names no run"
    run = RUNS[f"analyzer/{m[1]}T{m[2]}"]
    assert (int(m[3].replace(",", "")), int(m[4])) == (run["files"], run["megabytes"])
    rows = _table(text, "| tool | seconds |")
    assert len(rows) == len(run["seconds"]), rows
    for name, seconds, cpu, mb, findings in rows:
        tool = next(t for prefix, t in TOOLS.items() if name.startswith(prefix))
        shown = [f"{run['seconds'][tool]:.2f}", f"{run['cpu_seconds'][tool]:.2f}"]
        shown += [str(run["max_process_mb"][tool]), str(run["findings"][tool])]
        assert [seconds, cpu, mb, findings] == shown, (name, run["tools"].get(tool))
        assert tool not in run["tools"] or run["tools"][tool] in name, (name, run["tools"][tool])
    ratios = _table(text, "| ratio | measured |")
    assert [r[0] for r in ratios] == list(analyzer_vs_peers.TARGETS)
    for name, measured, target in ratios:
        _, _, op, bound = analyzer_vs_peers.TARGETS[name]
        assert results.shown_as(run["ratios"][name], measured), (name, measured)
        assert target == f"{op} {bound:g} ({run['verdicts'][name]})", (name, target)


def _fake_result(tool: str, seconds: float) -> analyzer_vs_peers.Result:
    return analyzer_vs_peers.Result(tool, tool, runs=[seconds], seconds=seconds, cpu_seconds=seconds * 2, findings=1)


def test_a_run_is_recorded_with_its_figures_and_replaces_one_of_its_key(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    results.record("analyzer/2000-01-01T00:00", {"seconds": {"ruff": 9.0}}, path)
    fake = {"ruff": _fake_result("ruff", 0.4049), "specguard-cold": _fake_result("specguard-cold", 1.0312)}
    ratios = {
        "specguard cold / ruff": {"ratio": 2.547, "verdict": "MISS"},
        "fixit / specguard cold": {"ratio": None, "verdict": "SKIPPED"},
    }
    started = datetime(2030, 1, 2, 3, 4, tzinfo=timezone.utc)
    run = analyzer_vs_peers.summary(started, "vllm", "0.33.0", 3231, 50_123_456, 2, (0.52, 0.4, 0.3), fake, ratios)
    results.record("analyzer/2030-01-02T03:04", run, path)
    results.record("analyzer/2000-01-01T00:00", {"seconds": {"ruff": 1.0}}, path)  # the same key again: replaced
    kept = json.loads(path.read_text())
    assert list(kept) == ["analyzer/2000-01-01T00:00", "analyzer/2030-01-02T03:04"]  # sorted, one per key
    assert kept["analyzer/2000-01-01T00:00"] == {"seconds": {"ruff": 1.0}}
    new = kept["analyzer/2030-01-02T03:04"]
    assert new["seconds"] == {"ruff": 0.4, "specguard-cold": 1.03} and new["megabytes"] == 50
    assert new["ratios"] == {"specguard cold / ruff": 2.547} and new["verdicts"]["fixit / specguard cold"] == "SKIPPED"
    assert new["date"] == "2030-01-02T03:04+00:00" and new["script"] == "benchmarks/analyzer_vs_peers.py"
    assert not list(tmp_path.glob("*.tmp"))
