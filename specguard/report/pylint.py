"""ruff's `pylint` format: `path:line: [CODE] message`, one line per finding, the whole message, no summary (what
tools that read pylint's output parse)."""

from __future__ import annotations

from specguard.findings import Finding
from specguard.report.names import shown


def render(findings: list[Finding]) -> str:
    return "\n".join(shown(f"{f.path}:{f.line}: [{f.code}] {f.message}") for f in findings)
