"""`--add-noqa`: a `# noqa: CODE` comment for each reported finding, as ruff adds them: on the finding's line, or,
where that line ends inside a string or continues with a backslash, on the line that string or continuation ends
(ruff's `noqa_row`, where the suppression is read); merged into that line's own `# noqa: ...` where it has one
(the codes sorted, as ruff rewrites them), else appended after two spaces."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from specguard.findings import Finding
from specguard.fix_model import split_lines
from specguard.fixes.apply import FixedText
from specguard.lines import comment_lines

# A noqa comment with codes (ruff's spelling); a bare noqa comment belongs to other tools and is left alone.
_CODED_NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)", re.IGNORECASE)


def _with_codes(line: str, codes: list[str]) -> str:
    body = line.rstrip("\r\n")
    ending = line[len(body) :]
    coded = _CODED_NOQA.search(body)
    if coded is not None:  # rewritten as ruff rewrites it: every code, sorted, after one space
        merged = sorted({*re.split(r"[\s,]+", coded.group("codes").upper()), *codes})
        return f"{body[: coded.start()]}# noqa: {', '.join(merged)}{body[coded.end() :]}{ending}"
    return f"{body.rstrip()}  # noqa: {', '.join(codes)}{ending}"


def add_noqa(path: str, text: str, findings: Sequence[Finding], line_codes: Callable[[str], set[str]]) -> FixedText:
    """`text` (the checked content of `path`) with the codes of `findings` (its reported ones) in noqa comments;
    `applied` lists the findings now covered. `line_codes` reads the codes a line's comments already silence."""
    lines = list(split_lines(text))
    moved = comment_lines(text)
    by_line: dict[int, list[Finding]] = {}
    for finding in findings:
        if finding.code != "SG000":  # a file that cannot be read has no line to carry it
            by_line.setdefault(moved.get(finding.line, finding.line), []).append(finding)
    result = FixedText(text)
    for number, found in sorted(by_line.items()):
        if not 0 < number <= len(lines):
            continue
        have = line_codes(lines[number - 1])
        codes = sorted({f.code for f in found} - have)
        if codes:
            lines[number - 1] = _with_codes(lines[number - 1], codes)
        result.applied.extend(found)
    result.text = "".join(lines)
    return result
