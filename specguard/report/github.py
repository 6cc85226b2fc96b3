"""GitHub Actions workflow commands: one `::error` annotation per finding, its file relative to the repository's
root (where the runner resolves it from), whatever folder specguard ran in."""

from __future__ import annotations

from pathlib import Path

from specguard.findings import Finding
from specguard.report.names import workflow_value
from specguard.settings import path_from


def _escape_property(value: str) -> str:
    return workflow_value(value).replace(":", "%3A").replace(",", "%2C")


def _annotation(f: Finding, root: Path) -> str:
    where = f"file={_escape_property(path_from(root, f.path))},line={f.line},col={f.col}"
    end = f"endLine={f.end_line or f.line},endColumn={f.end_col or f.col}"
    return f"::error title=specguard ({f.code}),{where},{end}::{workflow_value(f'{f.code} {f.message}')}"


def render(findings: list[Finding], root: Path) -> str:
    """The annotations; `root` is the repository's root (see specguard/report/paths.py)."""
    return "\n".join(_annotation(f, root) for f in findings)
