"""SARIF 2.1.0 for code scanning: one run, the rules as reportingDescriptors, one result per finding."""

from __future__ import annotations

import json
from pathlib import Path

from specguard import __version__
from specguard.analysis.findings import Finding
from specguard.report.docs_url import DOCS, rule_url
from specguard.rules import ALL_CODES, SOURCE_ERROR_DOCS, load_rule

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _rules() -> list[dict]:
    described = [
        {
            "id": "SG000",
            "name": "source-error",
            "shortDescription": {"text": "A file specguard could not read, decode or parse."},
            "fullDescription": {"text": SOURCE_ERROR_DOCS},
            "helpUri": rule_url("SG000"),
            "defaultConfiguration": {"level": "error"},
        }
    ]
    for code in ALL_CODES:
        rule = load_rule(code)
        described.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": rule.why},
                "help": {"text": rule.docs(), "markdown": rule.docs()},
                "helpUri": rule_url(rule.code),
                "defaultConfiguration": {"level": "error"},
            }
        )
    return described


def _uri(path: str) -> str:
    p = Path(path)
    return p.as_posix() if not p.is_absolute() else p.as_uri()


def _fixes(f: Finding) -> dict:
    """SARIF's `fixes`: one per finding that has one, replacing regions of its file."""
    if f.fix is None:
        return {}
    replacements = [
        {
            "deletedRegion": {"startLine": e.line, "startColumn": e.col, "endLine": e.end_line, "endColumn": e.end_col},
            **({"insertedContent": {"text": e.content}} if e.content else {}),
        }
        for e in f.fix.edits
    ]
    change = {"artifactLocation": {"uri": _uri(f.path)}, "replacements": replacements}
    return {"fixes": [{"description": {"text": f.fix.message}, "artifactChanges": [change]}]}


def render(findings: list[Finding]) -> str:
    rules = _rules()
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = [
        {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": "error",
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _uri(f.path)},
                        "region": {
                            "startLine": f.line,
                            "startColumn": f.col,
                            "endLine": f.end_line or f.line,
                            "endColumn": f.end_col or f.col,
                        },
                    },
                    **({"logicalLocations": [{"fullyQualifiedName": f.symbol}]} if f.symbol else {}),
                }
            ],
            **_fixes(f),
        }
        for f in findings
    ]
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "specguard", "version": __version__, "informationUri": DOCS, "rules": rules}
                },
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2)
