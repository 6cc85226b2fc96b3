"""Suppressions: `# specguard: ignore[SG101]` or `# noqa: SG101` on the reported line, and per-file-ignores."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable

from specguard.analysis.findings import Finding
from specguard.settings import Settings, selects

# A bare noqa comment belongs to other linters and does not silence specguard; a bare ignore does not either.
_NOQA = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*specguard:\s*ignore\[(?P<codes>[^\]]*)\]", re.IGNORECASE)


def line_codes(line: str) -> set[str]:
    codes: set[str] = set()
    for pattern in (_NOQA, _IGNORE):
        for match in pattern.finditer(line):
            codes.update(c.upper() for c in re.split(r"[\s,]+", match.group("codes")) if c)
    return codes


def _per_file(finding: Finding, settings: Settings) -> bool:
    if not settings.per_file_ignores:
        return False
    rel = settings.relative(finding.path)
    name = rel.rpartition("/")[2]
    for pattern, codes in settings.per_file_ignores.items():
        matches = fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(name, pattern)
        if matches and selects(codes, finding.code):
            return True
    return False


def is_suppressed(finding: Finding, settings: Settings, line: Callable[[str, int], str]) -> bool:
    """`line(path, number)` is the line as the file was checked (a run reads each file once)."""
    if _per_file(finding, settings):
        return True
    if finding.code == "SG000":
        return False
    return finding.code in line_codes(line(finding.path, finding.line))
