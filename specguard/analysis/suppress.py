"""Suppressions: `# specguard: ignore[SG101]` or `# noqa: SG101` on the reported line, `# specguard: noqa` (all
codes) or `# specguard: noqa: SG101` on a line of its own anywhere in the file (as ruff's `# ruff: noqa`), and
per-file-ignores."""

from __future__ import annotations

import fnmatch
import io
import linecache
import os
import re
import tokenize
from dataclasses import dataclass

from specguard._files import SOURCE_CAP, UnreadableFile, read_regular
from specguard.analysis.findings import Finding
from specguard.analysis.source import decode
from specguard.errors import SourceError
from specguard.settings import Settings

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
        if matches and any(finding.code.startswith(c.upper()) for c in codes):
            return True
    return False


# As ruff reads its own file-level noqa comments: the tool's name in lower case, `noqa` in any case; codes after
# a colon, up to the first word that is not one (a reason may follow); no colon: every code.
_FILE_NOQA = re.compile(r"#\s*specguard:\s*(?i:noqa)(?![\w-])(?P<colon>:)?(?P<rest>.*)")
_CODE = re.compile(r"[\s,]*([A-Z]+[0-9]+)(?![\w-])")


@dataclass(frozen=True)
class FileExemption:
    """What a file's `# specguard: noqa` comments exempt, and the ones that exempt nothing (with why)."""

    every_code: bool = False
    codes: frozenset[str] = frozenset()
    unused: tuple[str, ...] = ()  # "path:line: why", for a warning

    def covers(self, code: str) -> bool:
        return self.every_code or code in self.codes


def _file_exemption(path: str) -> FileExemption:
    try:
        text = decode(read_regular(path, SOURCE_CAP))
        if "specguard" not in text:
            return FileExemption()  # the usual case, without tokenizing
        comments = [
            (tok.start[0], tok.string, tok.line[: tok.start[1]].strip() == "")
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.COMMENT and "specguard" in tok.string
        ]
    except (UnreadableFile, SourceError, tokenize.TokenError, SyntaxError):
        return FileExemption()  # a file that cannot be tokenized gets SG000, which these never cover
    every, codes, unused = False, set(), []
    for line, comment, own_line in comments:
        if (match := _FILE_NOQA.search(comment)) is None:
            continue
        if not own_line:
            unused.append(f"{path}:{line}: `# specguard: noqa` after code exempts nothing; put it on a line of its own")
            continue
        if match.group("colon") is None:
            every = True
            continue
        named, rest = [], match.group("rest")
        while (code := _CODE.match(rest)) is not None:
            named.append(code.group(1))
            rest = rest[code.end() :]
        if not named:
            unused.append(f"{path}:{line}: `# specguard: noqa:` names no code (e.g. `# specguard: noqa: SG101`)")
        codes.update(named)
    return FileExemption(every, frozenset(codes), tuple(unused))


_EXEMPTIONS: dict[str, tuple[tuple[int, int], FileExemption]] = {}


def file_exemption(path: str) -> FileExemption:
    """The file's exemption, read once per version of the file (`--fix` rewrites files within one run)."""
    try:
        st = os.stat(path)
    except OSError:
        return FileExemption()
    stamp = (st.st_size, st.st_mtime_ns)
    cached = _EXEMPTIONS.get(path)
    if cached is None or cached[0] != stamp:
        cached = _EXEMPTIONS[path] = (stamp, _file_exemption(path))
    return cached[1]


def is_suppressed(finding: Finding, settings: Settings) -> bool:
    if _per_file(finding, settings):
        return True
    if finding.code == "SG000":
        return False
    if finding.code in line_codes(linecache.getline(finding.path, finding.line)):
        return True
    return file_exemption(finding.path).covers(finding.code)
