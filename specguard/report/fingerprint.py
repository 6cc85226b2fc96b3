"""A fingerprint per finding that stays the same while the code around it moves: SARIF's `partialFingerprints` and
GitLab's `fingerprint`, so code scanning and the merge-request widget match a finding across commits.

It hashes (SHA-256, the first 16 hex digits, as long as ruff's) the rule's code, the file's path from the
repository's root, the scope the finding is in (`DFlashSpeculator.propose`) and the text of the finding's first
line with its whitespace collapsed (GitHub's `primaryLocationLineHash` idea): never a line number, nor the message
(messages name lines). A file that cannot be read again hashes the message's first clause instead of its line.
Findings that would hash alike (the same call twice in one method) are told apart by their order, so each
fingerprint in a report is unique."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable

from specguard.findings import Finding
from specguard.report.clause import first_clause
from specguard.report.sources import Sources


def _line_text(f: Finding, sources: Sources) -> str:
    line = sources.line(f.path, f.line)
    return " ".join(line.split()) if line is not None else "message:" + first_clause(f.message)


def fingerprints(findings: list[Finding], path_of: Callable[[str], str], sources: Sources) -> list[str]:
    """One fingerprint per finding, in order; `path_of` gives a finding's path as the report names it."""
    seen: Counter[str] = Counter()
    out = []
    for f in findings:
        key = "\0".join([f.code, path_of(f.path), f.symbol or "", _line_text(f, sources)])
        seen[key] += 1
        if seen[key] > 1:
            key += f"\0{seen[key]}"
        out.append(hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16])
    return out
