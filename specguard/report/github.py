"""GitHub Actions workflow commands: one `::error` annotation per finding, its file relative to the repository's
root (where the runner resolves it from), whatever folder specguard ran in."""

from __future__ import annotations

from pathlib import Path

from specguard.findings import Finding
from specguard.report.names import decodable
from specguard.settings import path_from


def _escape(value: str) -> str:
    """As the runner reads a workflow command; a byte of a file name that is not UTF-8 as `\\xNN`."""
    return decodable(value).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: str) -> str:
    return _escape(value).replace(":", "%3A").replace(",", "%2C")


def _annotation(f: Finding, root: Path) -> str:
    where = f"file={_escape_property(path_from(root, f.path))},line={f.line},col={f.col}"
    end = f"endLine={f.end_line or f.line},endColumn={f.end_col or f.col}"
    return f"::error title=specguard ({f.code}),{where},{end}::{_escape(f'{f.code} {f.message}')}"


def render(findings: list[Finding], root: Path) -> str:
    """The annotations; `root` is the repository's root (see specguard/report/paths.py)."""
    return "\n".join(_annotation(f, root) for f in findings)
