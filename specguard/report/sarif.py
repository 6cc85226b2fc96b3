"""SARIF 2.1.0 for code scanning: one run, the rules as reportingDescriptors, one result per finding.

Paths are relative to the repository's root (`uriBaseId` `%SRCROOT%`, whose absolute URI `originalUriBaseIds`
gives), so the log says the same whichever folder specguard ran in and GitHub places each result on its file.

Each result has `partialFingerprints` (`specguard/v1`: report/fingerprint.py says what it hashes), so code scanning
keeps an alert when the code around it moves; GitHub still adds its own `primaryLocationLineHash`. A fix says
whether it is safe: the result's `properties.applicability` (`safe` or `unsafe`, ruff's word) and, for an unsafe
one, its description ("Unsafe fix (applied only with --unsafe-fixes): ...")."""

from __future__ import annotations

import json
from pathlib import Path

from specguard import __version__
from specguard.findings import Finding
from specguard.report.docs_url import DOCS, rule_url
from specguard.report.fingerprint import fingerprints
from specguard.report.names import decodable, uri_path
from specguard.report.sources import Sources
from specguard.rules import ALL_CODES, SOURCE_ERROR_DOCS, SOURCE_ERROR_TITLE, load_rule
from specguard.settings import path_from

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
FINGERPRINT = "specguard/v1"
UNSAFE = "Unsafe fix (applied only with --unsafe-fixes): "


def _sentence(title: str) -> str:
    """A rule's one-line title as the one short sentence code scanning shows above an alert."""
    return f"{title[:1].upper()}{title[1:]}."


def _descriptor(code: str, name: str, title: str, full: str, docs: str) -> dict:
    return {
        "id": code,
        "name": name,
        "shortDescription": {"text": _sentence(title)},
        "fullDescription": {"text": full},
        "help": {"text": docs, "markdown": docs},
        "helpUri": rule_url(code),
        "defaultConfiguration": {"level": "error"},
    }


def _rules() -> list[dict]:
    described = [_descriptor("SG000", "source-error", SOURCE_ERROR_TITLE, SOURCE_ERROR_DOCS, SOURCE_ERROR_DOCS)]
    for code in ALL_CODES:
        rule = load_rule(code)
        described.append(_descriptor(rule.code, rule.name, rule.title, rule.why, rule.docs()))
    return described


def _artifact(path: str, root: Path) -> dict:
    rel = path_from(root, path)
    if rel.startswith("/"):
        return {"uri": Path(rel).as_uri()}  # outside the repository (an installed vLLM): absolute
    return {"uri": uri_path(rel), "uriBaseId": SRCROOT}


def _fixes(f: Finding, root: Path) -> dict:
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
    change = {"artifactLocation": _artifact(f.path, root), "replacements": replacements}
    safe = f.fix.applies(None)
    description = decodable(f.fix.message if safe else UNSAFE + f.fix.message)
    return {
        "fixes": [{"description": {"text": description}, "artifactChanges": [change]}],
        "properties": {"applicability": f.fix.applicability},
    }


def render(findings: list[Finding], root: Path, sources: Sources | None = None) -> str:
    """The log; `root` is the repository's root (see specguard/report/paths.py)."""
    rules = _rules()
    index = {r["id"]: i for i, r in enumerate(rules)}
    prints = fingerprints(findings, lambda path: path_from(root, path), sources or Sources())
    results = [
        {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": "error",
            "message": {"text": decodable(f.message)},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _artifact(f.path, root),
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
            "partialFingerprints": {FINGERPRINT: fingerprint},
            **_fixes(f, root),
        }
        for f, fingerprint in zip(findings, prints, strict=True)
    ]
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "specguard", "version": __version__, "informationUri": DOCS, "rules": rules}
                },
                "originalUriBaseIds": {SRCROOT: {"uri": root.resolve().as_uri() + "/"}},
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2)
