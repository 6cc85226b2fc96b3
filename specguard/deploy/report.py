"""Render a config judgement as text or JSON (a list of findings with code, severity, key, value, message, fix)."""

from __future__ import annotations

import json
import textwrap
from collections import Counter

from specguard.deploy.hazards import NO_SOURCE, Judgement
from specguard.report.names import shown


def to_json(judgement: Judgement) -> str:
    return json.dumps([f.as_dict() for f in judgement.findings], indent=2)


def notes(judgement: Judgement, verbose: bool) -> list[str]:
    """The notes a run shows: with `verbose`, also the unset variables that decided a reported verdict."""
    env = judgement.env_note() if verbose else None
    return [*judgement.notes, *([env] if env else [])]


def to_text(judgement: Judgement, origin: str, verbose: bool = False) -> str:
    lines: list[str] = []
    if judgement.source:
        lines.append(f"{origin}: judged against {judgement.source}")
    for f in judgement.findings:
        lines.append(f"{origin}: {f.at_fault}: {f.code} {f.severity}")
        lines.extend(_wrapped(f.message, "  "))
        lines.extend(_wrapped(f"fix: {f.fix}", "       "))
    for note in notes(judgement, verbose):
        lines.append(f"{origin}: note: {note}")
    if judgement.not_judged:
        lines.extend(f"{origin}: {line}" for line in not_judged_lines(judgement))
    counts = Counter(f.severity for f in judgement.findings)
    if judgement.findings:
        detail = ", ".join(f"{n} {sev}{'s' if n > 1 else ''}" for sev, n in sorted(counts.items()))
        total = len(judgement.findings)
        lines.append(f"{total} hazard{'s' if total > 1 else ''} ({detail})")
    elif judgement.not_judged and set(judgement.not_judged.values()) == {NO_SOURCE}:
        lines.append("no hazard judged: no vLLM source")
    elif judgement.not_judged:
        lines.append("no hazards found among those judged")
    else:
        lines.append("no hazards found")
    return "\n".join(shown(line) for line in lines)  # a file name with a newline or odd bytes stays one line


def not_judged_lines(judgement: Judgement) -> list[str]:
    """One line per reason: without a source every hazard shares one."""
    by_reason: dict[str, list[str]] = {}
    for code, reason in judgement.not_judged.items():
        by_reason.setdefault(reason, []).append(code)
    out = []
    for reason, codes in by_reason.items():
        if reason == NO_SOURCE:
            out.append(
                f"no vLLM source (pass --vllm-source DIR or install vllm): {len(codes)} of {len(codes)} hazards "
                f"not judged ({', '.join(codes)}); --require-source makes this an error"
            )
        else:
            out.append(f"{', '.join(codes)} not judged: {reason}")
    return out


def not_judged_line(judgement: Judgement) -> str:
    return "; ".join(not_judged_lines(judgement))


def _wrapped(text: str, indent: str) -> list[str]:
    """`text` in lines of 108 columns, broken only between words: a path holds hyphens, and one longer than a line
    (a source under a deep cache folder) stays whole, so it can be copied."""
    return textwrap.wrap(
        text, 108, initial_indent="  ", subsequent_indent=indent, break_on_hyphens=False, break_long_words=False
    )
