"""ruff's `grouped` format: the findings under their file's name, each `line:col CODE [*] message` (the message's
first clause, as the concise line), the lines and columns aligned within a file; then the concise summary."""

from __future__ import annotations

from specguard.findings import Finding
from specguard.report.names import shown
from specguard.report.style import UNDERLINE, Style
from specguard.report.text import message_line, summary


def _group(path: str, findings: list[Finding], unsafe_fixes: bool | None, style: Style) -> list[str]:
    rows = max(len(str(f.line)) for f in findings)
    cols = max(len(str(f.col)) for f in findings)
    lines = [f"{style(shown(path), UNDERLINE)}:"]
    for f in findings:
        col = f"{f.col}".ljust(cols)
        lines.append(f"  {f.line:>{rows}}{style.separator()}{col} {message_line(f, unsafe_fixes, style)}")
    return lines


def render(findings: list[Finding], unsafe_fixes: bool | None, fixed: int, quiet: bool, style: Style) -> str:
    """Files in the order of their first finding; a blank line after each file's group."""
    by_path: dict[str, list[Finding]] = {}
    for f in findings:
        by_path.setdefault(f.path, []).append(f)
    groups = ["\n".join(_group(path, group, unsafe_fixes, style)) + "\n" for path, group in by_path.items()]
    if quiet:
        return "\n".join(groups).rstrip("\n")
    return "\n".join([*groups, *summary(findings, unsafe_fixes, fixed, style)])
