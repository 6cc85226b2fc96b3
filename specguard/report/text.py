"""`path:line:col: CODE message`, like ruff's concise output, with `[*]` on findings `--fix` would fix: one line per
finding, with the message's first clause (report/clause.py; the other formats keep the whole message)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from specguard.findings import Finding
from specguard.report.clause import first_clause
from specguard.report.names import shown
from specguard.report.style import BOLD, Style

PLAIN = Style(False)


def _plural(n: int, word: str, suffix: str = "s") -> str:
    return f"{n} {word}{'' if n == 1 else suffix}"


def _hidden(findings: list[Finding], unsafe_fixes: bool | None) -> int:
    """Unsafe fixes `--unsafe-fixes` would add; not mentioned once the user said `unsafe-fixes = false`."""
    if unsafe_fixes is not None:
        return 0
    return sum(1 for f in findings if f.fix is not None and not f.fix.applies(None))


def applies(f: Finding, unsafe_fixes: bool | None) -> bool:
    return f.fix is not None and f.fix.applies(unsafe_fixes)


def render(
    findings: list[Finding],
    unsafe_fixes: bool | None = None,
    fixed: int = 0,
    quiet: bool = False,
    style: Style = PLAIN,
) -> str:
    """The findings (those left after `--fix`, which fixed `fixed` others), then ruff's summary lines
    (not with `quiet`: ruff's `-q` prints the findings and nothing else)."""
    lines = [line(f, unsafe_fixes, style) for f in findings]
    return "\n".join(lines if quiet else [*lines, *summary(findings, unsafe_fixes, fixed, style)])


def line(f: Finding, unsafe_fixes: bool | None, style: Style = PLAIN) -> str:
    """One finding's concise line: path bold, `:` cyan, the code bold red, as ruff colours it."""
    sep = style.separator()
    where = sep.join([style(shown(f.path), BOLD), str(f.line), str(f.col)])
    return f"{where}{sep} {message_line(f, unsafe_fixes, style)}"


def message_line(f: Finding, unsafe_fixes: bool | None, style: Style = PLAIN) -> str:
    """`CODE [*] first clause`, the part of the concise line after the position (the grouped format's too)."""
    return f"{style.code(f.code)} {style.fix_mark(applies(f, unsafe_fixes))}{shown(first_clause(f.message))}"


def summary(findings: list[Finding], unsafe_fixes: bool | None, fixed: int = 0, style: Style = PLAIN) -> list[str]:
    """ruff's lines after the findings: how many, or that all checks passed; how many `--fix` would fix."""
    lines = []
    if fixed:
        total = fixed + len(findings)
        lines.append(f"Found {_plural(total, 'finding')} ({fixed} fixed, {len(findings)} remaining).")
    elif findings:
        lines.append(f"Found {_plural(len(findings), 'finding')}.")
    else:
        lines.append("All checks passed!")
    applicable = sum(1 for f in findings if applies(f, unsafe_fixes))
    hidden = _hidden(findings, unsafe_fixes)
    unsafe = f"{_plural(hidden, 'unsafe fix', 'es')} available with `--fix --unsafe-fixes`"
    if applicable and hidden:
        lines.append(f"{style.fix_mark(True)}{applicable} fixable with `--fix` ({unsafe}).")
    elif applicable:
        lines.append(f"{style.fix_mark(True)}{applicable} fixable with `--fix`.")
    elif hidden:
        lines.append(f"{unsafe}.")
    return lines


def diff_summary(fixed: int, findings: list[Finding], unsafe_fixes: bool | None) -> str:
    """The line after `--diff`'s diffs, as ruff words it; `findings` are the reported ones."""
    hidden = _hidden(findings, unsafe_fixes)
    if hidden and fixed:
        more = _plural(hidden, "additional fix", "es")
        return f"Would fix {_plural(fixed, 'finding')} ({more} available with `--unsafe-fixes`)."
    if hidden:
        return f"No findings would be fixed ({_plural(hidden, 'fix', 'es')} available with `--unsafe-fixes`)."
    return f"Would fix {_plural(fixed, 'finding')}." if fixed else ""


@dataclass(frozen=True)
class RuleCount:
    """One row of `--statistics`, with the keys of ruff's JSON."""

    code: str
    name: str
    count: int
    fixable: bool  # every finding of the rule is fixable (ruff's meaning since it added `fixable_count`)
    fixable_count: int


def rule_counts(findings: list[Finding], names: dict[str, str], unsafe_fixes: bool | None) -> list[RuleCount]:
    """Counts per rule, most frequent first; ties in rule order."""
    counts = Counter(f.code for f in findings)
    fixable = Counter(f.code for f in findings if applies(f, unsafe_fixes))
    rows = [RuleCount(c, names.get(c, ""), n, fixable[c] == n, fixable[c]) for c, n in sorted(counts.items())]
    return sorted(rows, key=lambda r: -r.count)


def statistics(findings: list[Finding], names: dict[str, str], unsafe_fixes: bool | None, quiet: bool = False) -> str:
    """ruff's `--statistics` table (count, code, `[*]` all fixable / `[-]` some / `[ ]` none, name), then its
    summary; nothing at all for no findings, as ruff."""
    rows = rule_counts(findings, names, unsafe_fixes)
    if not rows:
        return ""
    width = len(str(rows[0].count))
    code_width = max(len(r.code) for r in rows)
    marks = any(r.fixable_count for r in rows)

    def mark(r: RuleCount) -> str:
        return ("[*] " if r.fixable else "[-] " if r.fixable_count else "[ ] ") if marks else ""

    lines = [f"{r.count:>{width}}\t{r.code:<{code_width}}\t{mark(r)}{r.name}" for r in rows]
    return "\n".join(lines if quiet else [*lines, *summary(findings, unsafe_fixes)])


def fixes_made(applied: list[Finding], names: dict[str, str]) -> list[str]:
    """ruff's `--show-fixes` lines: `Fixed N findings:`, then each file and, per rule, how many of its findings
    were fixed; a blank line before and after. Nothing when nothing was fixed."""
    if not applied:
        return []
    lines = ["", f"Fixed {_plural(len(applied), 'finding')}:"]
    by_path: dict[str, Counter[str]] = {}
    for f in applied:
        by_path.setdefault(f.path, Counter())[f.code] += 1
    for path, codes in sorted(by_path.items()):
        lines.append(f"- {shown(path)}:")
        lines.extend(f"    {n} \u00d7 {code} ({names.get(code, '')})" for code, n in sorted(codes.items()))
    return [*lines, ""]
