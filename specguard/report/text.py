"""`path:line:col: CODE message`, like ruff's concise output, with `[*]` on findings `--fix` would fix."""

from __future__ import annotations

from collections import Counter

from specguard.analysis.findings import Finding


def _plural(n: int, word: str, suffix: str = "s") -> str:
    return f"{n} {word}{'' if n == 1 else suffix}"


def _hidden(findings: list[Finding], unsafe_fixes: bool | None) -> int:
    """Unsafe fixes `--unsafe-fixes` would add; not mentioned once the user said `unsafe-fixes = false`."""
    if unsafe_fixes is not None:
        return 0
    return sum(1 for f in findings if f.fix is not None and not f.fix.applies(None))


def render(findings: list[Finding], unsafe_fixes: bool | None = None, fixed: int = 0) -> str:
    """The findings (those left after `--fix`, which fixed `fixed` others), then ruff's summary lines."""

    def marker(f: Finding) -> str:
        return "[*] " if f.fix is not None and f.fix.applies(unsafe_fixes) else ""

    lines = [f"{f.path}:{f.line}:{f.col}: {f.code} {marker(f)}{f.message}" for f in findings]
    if fixed:
        total = fixed + len(findings)
        lines.append(f"Found {_plural(total, 'finding')} ({fixed} fixed, {len(findings)} remaining).")
    elif findings:
        lines.append(f"Found {_plural(len(findings), 'finding')}.")
    applicable = sum(1 for f in findings if marker(f))
    hidden = _hidden(findings, unsafe_fixes)
    unsafe = f"{_plural(hidden, 'unsafe fix', 'es')} available with `--fix --unsafe-fixes`"
    if applicable and hidden:
        lines.append(f"[*] {applicable} fixable with `--fix` ({unsafe}).")
    elif applicable:
        lines.append(f"[*] {applicable} fixable with `--fix`.")
    elif hidden:
        lines.append(f"{unsafe}.")
    return "\n".join(lines)


def diff_summary(fixed: int, findings: list[Finding], unsafe_fixes: bool | None) -> str:
    """The line after `--diff`'s diffs, as ruff words it; `findings` are the reported ones."""
    hidden = _hidden(findings, unsafe_fixes)
    if hidden and fixed:
        more = _plural(hidden, "additional fix", "es")
        return f"Would fix {_plural(fixed, 'finding')} ({more} available with `--unsafe-fixes`)."
    if hidden:
        return f"No findings would be fixed ({_plural(hidden, 'fix', 'es')} available with `--unsafe-fixes`)."
    return f"Would fix {_plural(fixed, 'finding')}." if fixed else ""


def statistics(findings: list[Finding], names: dict[str, str]) -> str:
    counts = Counter(f.code for f in findings)
    return "\n".join(f"{n:>5}  {code}  {names.get(code, '')}".rstrip() for code, n in counts.most_common())
