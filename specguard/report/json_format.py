"""ruff-compatible JSON: an array of objects with code, message, filename, location, end_location, url."""

from __future__ import annotations

import json
from pathlib import Path

from specguard.analysis.findings import Finding
from specguard.report.docs_url import rule_url


def render(findings: list[Finding]) -> str:
    return json.dumps(
        [
            {
                "code": f.code,
                "message": f.message,
                "filename": str(Path(f.path).resolve()),
                "location": {"row": f.line, "column": f.col},
                "end_location": {"row": f.end_line or f.line, "column": f.end_col or f.col},
                "fix": None,
                "noqa_row": f.line,
                "url": rule_url(f.code),
            }
            for f in findings
        ],
        indent=2,
    )
