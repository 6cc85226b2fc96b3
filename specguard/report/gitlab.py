"""GitLab's code quality report (`artifacts: reports: codequality`), as ruff writes it: a JSON array of objects with
`check_name`, `description` (`CODE: message`, the whole message), `severity`, `fingerprint` (report/fingerprint.py)
and `location` with `path` and `positions` (`begin`/`end` `line` and `column`). GitLab's documented required fields
are `description`, `check_name`, `fingerprint`, `severity`, `location.path` and `location.lines.begin` or
`location.positions.begin.line`; `location.lines` (`begin`, `end`) is written too, for GitLab versions that read
only it.

Paths are relative to `CI_PROJECT_DIR` (where GitLab's job checked the repository out) when it is set, else to the
repository's root (as SARIF's), whatever folder specguard ran in."""

from __future__ import annotations

import json
import os
from pathlib import Path

from specguard.findings import Finding
from specguard.report.fingerprint import fingerprints
from specguard.report.sources import Sources
from specguard.settings import path_from


def project_dir(repository_root: Path) -> Path:
    return Path(os.environ["CI_PROJECT_DIR"]) if os.environ.get("CI_PROJECT_DIR") else repository_root


def _issue(f: Finding, path: str, fingerprint: str) -> dict:
    end_line, end_col = f.end_line or f.line, f.end_col or f.col
    return {
        "check_name": f.code,
        "description": f"{f.code}: {f.message}",
        "severity": "major",
        "fingerprint": fingerprint,
        "location": {
            "path": path,
            "lines": {"begin": f.line, "end": end_line},
            "positions": {
                "begin": {"line": f.line, "column": f.col},
                "end": {"line": end_line, "column": end_col},
            },
        },
    }


def render(findings: list[Finding], repository_root: Path, sources: Sources) -> str:
    base = project_dir(repository_root)
    paths = {f.path: path_from(base, f.path) for f in findings}
    prints = fingerprints(findings, paths.__getitem__, sources)
    return json.dumps([_issue(f, paths[f.path], p) for f, p in zip(findings, prints, strict=True)], indent=2)
