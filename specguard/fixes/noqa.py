"""`--add-noqa`: a `# noqa: CODE` comment on each reported line, as ruff adds them: merged into the line's own
`# noqa: ...` comment where it has one, else appended after two spaces. A line whose end lies inside a string or
continues with a backslash cannot take a comment there; it is left as it is and named."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Callable, Sequence

from specguard.findings import Finding
from specguard.fix_model import split_lines
from specguard.fixes.apply import FixedText

# A noqa comment with codes (ruff's spelling); a bare noqa comment belongs to other tools and is left alone.
_CODED_NOQA = re.compile(r"(#\s*noqa:\s*)([A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)", re.IGNORECASE)


def _commentable(text: str) -> set[int]:
    """The lines whose end a comment may follow: those that end in a token stream's NEWLINE or NL (a line that
    ends inside a string, or with a backslash, has neither)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return set()
    return {t.start[0] for t in tokens if t.type in (tokenize.NEWLINE, tokenize.NL)}


def _with_codes(line: str, codes: list[str]) -> str:
    body = line.rstrip("\r\n")
    ending = line[len(body) :]
    coded = _CODED_NOQA.search(body)
    if coded is not None:
        merged = f"{coded.group(2)}, {', '.join(codes)}"
        return f"{body[: coded.start(2)]}{merged}{body[coded.end(2) :]}{ending}"
    return f"{body.rstrip()}  # noqa: {', '.join(codes)}{ending}"


def add_noqa(path: str, text: str, findings: Sequence[Finding], line_codes: Callable[[str], set[str]]) -> FixedText:
    """`text` (the checked content of `path`) with the codes of `findings` (its reported ones) in noqa comments;
    `applied` lists the findings now covered. `line_codes` reads the codes a line's comments already silence."""
    lines = split_lines(text)
    commentable = _commentable(text)
    by_line: dict[int, list[Finding]] = {}
    for finding in findings:
        if finding.code != "SG000":  # a file that cannot be read has no line to carry it
            by_line.setdefault(finding.line, []).append(finding)
    result = FixedText(text)
    for number, found in sorted(by_line.items()):
        if not 0 < number <= len(lines):
            continue
        if number not in commentable:
            result.refused.append(f"{path}:{number}: no noqa added: the line ends inside a string or continues")
            continue
        have = line_codes(lines[number - 1])
        codes = sorted({f.code for f in found} - have)
        if codes:
            lines[number - 1] = _with_codes(lines[number - 1], codes)
        result.applied.extend(found)
    result.text = "".join(lines)
    return result
