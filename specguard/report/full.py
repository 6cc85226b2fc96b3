"""ruff's `full` format: for each finding a header (`CODE [*] message`, the whole message), where it is
(` --> path:line:col`), a frame of the source around it (report/frame.py) and, where it has a fix, the fix's title
(`help: ...`, with ruff's note when the fix is unsafe); then the summary lines of the concise format.

The frame is read from the file again (report/sources.py); a file that cannot be read gets none, never an error."""

from __future__ import annotations

from specguard.findings import Finding
from specguard.report.frame import frame
from specguard.report.names import shown
from specguard.report.sources import Sources
from specguard.report.style import BOLD, BRIGHT_BLUE, BRIGHT_CYAN, BRIGHT_RED, Style
from specguard.report.text import applies, summary

UNSAFE_NOTE = "note: This is an unsafe fix and may change runtime behavior"


def _block(f: Finding, unsafe_fixes: bool | None, lines: list[str] | None, style: Style) -> list[str]:
    fixable = f" [{style('*', BOLD, BRIGHT_CYAN)}]" if applies(f, unsafe_fixes) else ""
    header = f"{style(f.code, BOLD, BRIGHT_RED)}{fixable}{style(' ' + shown(f.message), BOLD)}"
    width, rows = frame(lines, f, style) if lines is not None else (0, [])
    gutter = " " * width
    block = [header, f"{style(gutter + '-->', BOLD, BRIGHT_BLUE)} {shown(f.path)}:{f.line}:{f.col}"]
    block += rows
    if f.fix is not None:
        block.append(f"{style('help', BOLD, BRIGHT_CYAN)}{style(': ' + shown(f.fix.message), BOLD)}")
        if not f.fix.applies(None):
            block.append(UNSAFE_NOTE)
    return block


def render(
    findings: list[Finding], unsafe_fixes: bool | None, fixed: int, quiet: bool, style: Style, sources: Sources
) -> str:
    """Each finding's block, a blank line after each, then ruff's summary (not with `quiet`)."""
    blocks = ["\n".join(_block(f, unsafe_fixes, sources.lines(f.path), style)) + "\n" for f in findings]
    if quiet:
        return "\n".join(blocks).rstrip("\n")
    return "\n".join([*blocks, *summary(findings, unsafe_fixes, fixed, style)])
