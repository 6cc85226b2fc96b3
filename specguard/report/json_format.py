"""ruff-compatible JSON: the array `ruff check --output-format json` prints, key for key, `fix` included."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from specguard.findings import Finding
from specguard.fix_model import Fix
from specguard.report.docs_url import rule_url
from specguard.report.sources import Sources
from specguard.report.text import RuleCount
from specguard.rules import rule_name


def _location(row: int, column: int) -> dict[str, int]:
    return {"row": row, "column": column}


def fix_object(fix: Fix | None) -> dict | None:
    """ruff's `fix`: what editors and review bots apply."""
    if fix is None:
        return None
    return {
        "applicability": fix.applicability,
        "message": fix.message,
        "edits": [
            {
                "content": e.content,
                "location": _location(e.line, e.col),
                "end_location": _location(e.end_line, e.end_col),
            }
            for e in fix.edits
        ],
    }


def render(findings: list[Finding], sources: Sources | None = None) -> str:
    """ruff's JSON; `noqa_row` is the line a `# noqa` comment for the finding goes on, read from `sources`."""
    sources = sources or Sources()
    return json.dumps(
        [
            {
                "cell": None,  # ruff's notebook cell; specguard reads .py files only
                "code": f.code,
                "end_location": _location(f.end_line or f.line, f.end_col or f.col),
                "filename": f.path if f.path == "-" else str(Path(f.path).resolve()),  # stdin unnamed: ruff's `-`
                "fix": fix_object(f.fix),
                "location": _location(f.line, f.col),
                "message": f.message,
                "name": rule_name(f.code),
                "noqa_row": sources.comment_line(f.path, f.line),
                "severity": "error",
                "url": rule_url(f.code),
            }
            for f in findings
        ],
        indent=2,
        sort_keys=True,
    )


def statistics(rows: list[RuleCount]) -> str:
    """`--statistics` as ruff's JSON: `code`, `name`, `count`, `fixable`, `fixable_count` per rule."""
    return json.dumps([dataclasses.asdict(r) for r in rows], indent=2)
