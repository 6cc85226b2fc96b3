"""Suppressions: `# specguard: ignore[SG101]` or `# noqa: SG101` on the reported line (or the line ending its string
or continuation, ruff's noqa_row), `# specguard: noqa` (all
codes) or `# specguard: noqa: SG101` on a line of its own anywhere in the file (as ruff's `# ruff: noqa`), and
per-file-ignores."""

from __future__ import annotations

import fnmatch
import io
import re
import tokenize
from dataclasses import dataclass
from typing import Protocol

from specguard.findings import Finding
from specguard.settings import Settings, selects

# A bare noqa comment belongs to other linters and does not silence specguard; a bare ignore does not either.
_NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)", re.IGNORECASE)
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


def file_exemption(path: str, text: str) -> FileExemption:
    """What the `# specguard: noqa` comments of `text` (the file at `path`, as the run read it) exempt."""
    if "specguard" not in text:
        return FileExemption()  # the usual case, without tokenizing
    try:
        comments = [
            (tok.start[0], tok.string, tok.line[: tok.start[1]].strip() == "")
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.COMMENT and "specguard" in tok.string
        ]
    except (tokenize.TokenError, SyntaxError):
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


class CheckedFiles(Protocol):
    """The files as the run read them, once (`_Run`): every suppression is judged on those bytes."""

    def line(self, path: str, number: int) -> str: ...

    def comment_line(self, path: str, number: int, code: str) -> int: ...

    def exemption(self, path: str) -> FileExemption: ...


def is_suppressed(finding: Finding, settings: Settings, files: CheckedFiles) -> bool:
    if _per_file(finding, settings):
        return True
    if finding.code == "SG000":
        return False
    # on the line a comment for it can go on (ruff's noqa_row): a string's or a continuation's last line
    comment_line = files.comment_line(finding.path, finding.line, finding.code)
    if finding.code in line_codes(files.line(finding.path, comment_line)):
        return True
    return files.exemption(finding.path).covers(finding.code)
