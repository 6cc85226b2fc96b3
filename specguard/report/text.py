"""`path:line:col: CODE message`, like ruff's concise output."""

from __future__ import annotations

from collections import Counter

from specguard.analysis.findings import Finding


def render(findings: list[Finding]) -> str:
    lines = [f"{f.path}:{f.line}:{f.col}: {f.code} {f.message}" for f in findings]
    if findings:
        lines.append(f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''}.")
    return "\n".join(lines)


def statistics(findings: list[Finding], names: dict[str, str]) -> str:
    counts = Counter(f.code for f in findings)
    return "\n".join(f"{n:>5}  {code}  {names.get(code, '')}".rstrip() for code, n in counts.most_common())
