"""`specguard check -` (or `--stdin-filename NAME` with no path): standard input checked as the file NAME of its
project, as editors and pre-commit's stdin hooks run ruff. Settings and per-file ignores are those of NAME; the
modules it imports are read from disk. `--fix` writes the fixed source to stdout and the report to stderr."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from specguard import check_cli
from specguard._files import SOURCE_CAP
from specguard.console import tell
from specguard.errors import UserError
from specguard.findings import source_error
from specguard.report.names import shown

if TYPE_CHECKING:
    from specguard.analysis.engine import CheckResult
    from specguard.findings import Finding
    from specguard.settings import Settings

STDIN = Path("-")
# Options that read or write the files of a tree, which standard input is not.
_FILE_OPTIONS = {"show_files": "--show-files", "show_settings": "--show-settings", "add_noqa": "--add-noqa"}


def reads_stdin(args: argparse.Namespace) -> bool:
    """`-` as the only path, or `--stdin-filename` (then, as ruff, any path given is left out, and said)."""
    return args.paths == [STDIN] or args.stdin_filename is not None


def run_stdin(args: argparse.Namespace) -> int:
    from specguard.analysis.engine import CheckResult
    from specguard.composition import check_given

    for key, flag in _FILE_OPTIONS.items():
        if getattr(args, key):
            raise UserError(f"{flag} works on files; it does not read standard input (drop `-` or {flag})")
    if args.vllm:
        raise UserError("--vllm checks the installed vLLM's files; it does not read standard input")
    for path in [] if args.quiet or args.silent else [p for p in args.paths if p != STDIN]:
        tell(f"specguard: warning: ignoring {shown(str(path))} in favor of standard input")
    name = args.stdin_filename or "-"
    data = _read_stdin()
    settings = check_cli.settings_for(args, [Path(name)])
    check_cli.reject_empty_selection(settings)
    if len(data) > SOURCE_CAP:  # as a file over the cap: SG000, and under --fix the input goes back whole
        result = CheckResult(findings=[source_error(name, _TOO_LARGE)], files=1)
    else:
        result = check_given(name, data, settings)
    result = check_cli.unselected_source_errors(result, settings)
    fixing = settings.fix and not args.diff
    applied: list[Finding] = []
    if args.diff or fixing:
        text, applied = _fixed(args, result, name, data, settings)
        if args.diff:
            return _print_diff(args, name, (data, text), len(applied), result, settings)
        sys.stdout.buffer.write(text)  # the editor's buffer, written whatever the report says
        shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer)  # the rest of an input over the cap, unread
        sys.stdout.flush()
        if applied:
            result = check_cli.unselected_source_errors(check_given(name, text, settings), settings)
            data = text
    findings = check_cli.offered_fixes(check_cli.reported(args, result, settings), settings)
    given = {name: _text_of(data)}
    report = check_cli.report_text(args, findings, settings, applied, given)
    if fixing and args.output_file is None:
        if report and not args.silent:
            print(report, file=sys.stderr)  # stdout holds the fixed source
    else:
        check_cli.emit_report(report, args, settings.root)
    check_cli.tell_run(args, result, settings)
    return check_cli.exit_code(args, result, findings, len(applied))


def _text_of(data: bytes) -> str:
    """The source as the report's frames and fingerprints show it (a bad coding cookie is an SG000 already)."""
    from specguard.fixes.apply import encoding_of

    try:
        return data.decode(encoding_of(data), errors="replace")
    except (SyntaxError, LookupError):
        return data.decode("utf-8", errors="replace")


_TOO_LARGE = f"standard input holds more than {SOURCE_CAP} bytes, the limit for a source file; not read further"


def _read_stdin() -> bytes:
    """Up to one byte past the cap: more than the cap is an SG000, and the rest is never held in memory."""
    return sys.stdin.buffer.read(SOURCE_CAP + 1)


def _fixed(
    args: argparse.Namespace, result: CheckResult, name: str, data: bytes, settings: Settings
) -> tuple[bytes, list[Finding]]:
    """The source with the fixes that apply, and how many; the source as given where none applies, where it
    cannot be analyzed (SG000) or where the name is excluded."""
    from specguard.fixes.apply import encoding_of, fix_source

    policy = check_cli.fix_policy(settings)
    reported = check_cli.reported(args, result, settings)
    chosen = [f for f in reported if policy.applies(f)]
    if not chosen or result.project is None or any(f.code == "SG000" for f in reported):
        return data, []
    encoding = encoding_of(data)
    fixed = fix_source(result.project, name, data.decode(encoding), chosen, policy)
    for note in [] if args.quiet or args.silent else fixed.refused:
        tell(f"specguard: warning: {note}")
    try:
        return fixed.text.encode(encoding), fixed.applied
    except UnicodeEncodeError:
        tell(f"specguard: warning: {name}: not fixed: the fixed text cannot be written in its encoding ({encoding})")
        return data, []


def _print_diff(
    args: argparse.Namespace, name: str, texts: tuple[bytes, bytes], fixed: int, result: CheckResult, settings: Settings
) -> int:
    """`--diff`: as for a file, the diff and the count on stdout; exit 1 where something would be fixed."""
    from specguard.fixes.apply import encoding_of, unified_diff
    from specguard.report.text import diff_summary

    encoding = encoding_of(texts[0])
    before, after = (t.decode(encoding) for t in texts)
    diff = unified_diff(shown(name), before, after) if fixed else ""
    offered = check_cli.offered_fixes(check_cli.reported(args, result, settings), settings)
    check_cli.emit_diff([diff] if diff else [], "", args, settings.root)
    summary = diff_summary(fixed, offered, settings.unsafe_fixes)
    if summary and not (args.quiet or args.silent):
        tell(summary)  # on stderr, as ruff's for standard input
    check_cli.tell_run(args, result, settings)
    if result.errors:
        return check_cli.EXIT_ERROR
    return check_cli.EXIT_FINDINGS if fixed and not args.exit_zero else check_cli.EXIT_CLEAN
