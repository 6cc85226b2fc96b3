"""GitHub Actions workflow commands: one `::error` annotation per finding."""

from __future__ import annotations

from specguard.analysis.findings import Finding


def _escape(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: str) -> str:
    return _escape(value).replace(":", "%3A").replace(",", "%2C")


def render(findings: list[Finding]) -> str:
    return "\n".join(
        f"::error title=specguard ({f.code}),file={_escape_property(f.path)},line={f.line},col={f.col},"
        f"endLine={f.end_line or f.line},endColumn={f.end_col or f.col}::{_escape(f'{f.code} {f.message}')}"
        for f in findings
    )
