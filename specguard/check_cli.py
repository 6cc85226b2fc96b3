"""`specguard check`: its options, spelled and grouped as ruff's, and the run from settings to report and exit code."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from specguard.console import emit, tell
from specguard.errors import UserError
from specguard.report.names import shown

if TYPE_CHECKING:
    from specguard.analysis.engine import CheckResult
    from specguard.findings import Finding
    from specguard.settings import Settings

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

# ruff's names; `text` is specguard's older name for `concise` (report/formats.py writes each)
OUTPUT_FORMATS = ["concise", "text", "full", "grouped", "json", "sarif", "github", "gitlab", "pylint", "junit"]


def add_options(check: argparse.ArgumentParser) -> None:
    """The options, spelled and grouped as ruff's (specguard's older spellings kept as aliases)."""
    check.add_argument("paths", nargs="*", type=Path, help="files or folders (default: .)")
    check.add_argument("--vllm", action="store_true", help="also analyze the vLLM installed in this environment")
    check.add_argument("--config", type=Path, help="a pyproject.toml or TOML file to read settings from")
    check.add_argument("--rule-pack", action="append", type=Path, default=[], help="an extra rule pack (TOML)")
    check.add_argument(
        "--builtin-packs",
        help="comma-separated built-in packs to read (vllm, sglang), instead of those of the framework the paths are",
    )
    check.add_argument(
        "--output-format",
        "--format",
        dest="output_format",
        choices=OUTPUT_FORMATS,
        default=None,
        help="concise (default; `text` is the same): a line per finding, the message's first clause; full: the "
        "whole message, the source around it and the fix; grouped: the concise lines under each file; json (ruff's), "
        "sarif, github (annotations), gitlab (code quality), pylint, junit (XML)",
    )
    check.add_argument(
        "-o", "--output-file", "--output", dest="output_file", type=Path, help="write the report to this file"
    )
    check.add_argument(
        "--statistics", action="store_true", help="print the number of findings per rule (concise, full or json)"
    )
    check.add_argument("--show-files", action="store_true", help="list the files that would be checked, and stop")
    check.add_argument("--show-settings", action="store_true", help="print the settings that would be used, and stop")
    check.add_argument("--baseline", type=Path, help="ignore the findings recorded in this file")
    check.add_argument("--write-baseline", type=Path, help="record the current findings in this file")

    fix = check.add_argument_group("fixes (as in ruff)")
    fix.add_argument("--fix", action=argparse.BooleanOptionalAction, help="apply safe fixes in place")
    fix.add_argument(
        "--unsafe-fixes",
        action=argparse.BooleanOptionalAction,
        help="also apply unsafe fixes (alone: show them as available)",
    )
    fix.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
    fix.add_argument("--show-fixes", action="store_true", help="after --fix, list the fixes applied per file and rule")
    fix.add_argument(
        "--exit-non-zero-on-fix",
        action="store_true",
        help="exit 1 when --fix fixed something, even if no finding is left",
    )
    fix.add_argument(
        "--add-noqa", action="store_true", help="add `# noqa: CODE` to each line with a finding, and exit 0"
    )

    rules = check.add_argument_group("rule selection (comma-separated codes or prefixes; the most specific wins)")
    rules.add_argument("--select", action="append", help="codes to run, instead of the configured ones (ALL: all)")
    rules.add_argument("--ignore", action="append", help="codes to skip")
    rules.add_argument("--extend-select", action="append", help="codes to run in addition to the selected ones")
    rules.add_argument("--fixable", action="append", help="codes that may be fixed (default: all)")
    rules.add_argument("--unfixable", action="append", help="codes never to fix")

    files = check.add_argument_group("file selection")
    files.add_argument("--exclude", action="append", help="patterns to skip, instead of the configured ones")
    files.add_argument("--extend-exclude", action="append", help="patterns to skip, besides the configured ones")
    files.add_argument(
        "--respect-gitignore",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="skip what .gitignore, .git/info/exclude and .ignore files exclude (default: on)",
    )
    files.add_argument(
        "--force-exclude",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="apply the excludes to files named on the command line too (what the pre-commit hook passes)",
    )

    misc = check.add_argument_group("miscellaneous")
    misc.add_argument("-n", "--no-cache", action="store_true", help="neither read nor write the cache")
    misc.add_argument("--cache-dir", type=Path, help="where to keep the cache (default: .specguard_cache)")
    misc.add_argument("-e", "--exit-zero", action="store_true", help="exit 0 even when there are findings")
    misc.add_argument(
        "--stdin-filename",
        help="the name of the file standard input holds (with `-` or no path): its settings and per-file ignores",
    )

    levels = check.add_mutually_exclusive_group()
    levels.add_argument("-q", "--quiet", action="store_true", help="print the findings and nothing else")
    levels.add_argument(
        "-s", "--silent", action="store_true", help="print nothing (the exit code still says 1 for findings)"
    )
    levels.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also list, on stderr, the sites a rule could not decide (an unresolved call, a budget) and why",
    )


def _split(values: list[str] | None) -> list[str] | None:
    """A repeatable option of comma-separated values, as one list (empty items kept)."""
    if values is None:
        return None
    return [x.strip() for value in values for x in value.split(",")]


def _codes(values: list[str] | None, flag: str) -> list[str] | None:
    """A repeatable option's rule codes; an empty one is an error (`--select ''` used to check nothing)."""
    for value in values or []:
        if not all(x.strip() for x in value.split(",")):
            raise UserError(
                f"{flag} {value!r}: an empty rule code; give codes or prefixes separated by commas, e.g. {flag} "
                "SG101,SG2 (`specguard rules` lists them)"
            )
    return _split(values)


def _patterns_from_cwd(values: list[str] | None) -> list[str]:
    """Exclude patterns typed on the command line: as ruff, one with a `/` is anchored at the current folder."""
    cwd = os.path.realpath(".")
    return [p if "/" not in p or p.startswith("/") else f"{cwd}/{p}" for p in _split(values) or [] if p]


def _installed_vllm() -> Path:
    from specguard.program.modules import installed_roots

    roots = [root / "vllm" for root in installed_roots("vllm")]  # located, not imported
    if not roots or not roots[0].is_dir():
        raise UserError("--vllm: no vLLM is installed in this environment (pip install vllm, or pass its path)")
    return roots[0]


_CODE_OPTIONS = ("select", "ignore", "extend_select", "fixable", "unfixable")


def settings_for(args: argparse.Namespace, paths: list[Path]) -> Settings:
    """The configuration's settings with the command line's on top, as ruff layers them."""
    from specguard.settings import Selection, load_settings

    warnings: list[str] = []
    if args.config is None:
        _one_configuration(paths)
    settings = load_settings(args.config, paths[0], warnings)
    for warning in [] if args.quiet or args.silent else warnings:
        tell(f"specguard: warning: {warning}")
    codes = {key: _codes(getattr(args, key), "--" + key.replace("_", "-")) for key in _CODE_OPTIONS}
    updates: dict = {
        "cli_rules": Selection(codes["select"], codes["ignore"] or [], codes["extend_select"] or []),
        "cli_fixes": Selection(codes["fixable"], codes["unfixable"] or []),
        "extend_exclude": [*settings.extend_exclude, *_patterns_from_cwd(args.extend_exclude)],
    }
    if args.exclude is not None:
        updates["exclude"] = _patterns_from_cwd(args.exclude)
    for key in ("fix", "unsafe_fixes", "cache_dir", "force_exclude", "respect_gitignore"):
        if getattr(args, key) is not None:
            updates[key] = getattr(args, key)
    if args.rule_pack:
        updates["rule_packs"] = [*settings.rule_packs, *args.rule_pack]
    if args.builtin_packs is not None:
        updates["builtin_packs"] = [name.strip() for name in args.builtin_packs.split(",") if name.strip()]
    settings = dataclasses.replace(settings, **updates)
    _reject_unknown_codes(settings)
    args.output_format = _output_format(args, settings)
    return settings


def _one_configuration(paths: list[Path]) -> None:
    """One run checks with one project's settings, so paths whose nearest [tool.specguard] differs are refused:
    checked with the first one's, the result would depend on their order (ruff gives each file its own)."""
    from specguard.settings import discover_settings

    by_folder: dict[Path, tuple[Path | None, Path | None]] = {}
    first: tuple[Path | None, Path | None] | None = None
    for path in paths:
        folder = path.parent if path.suffix in (".py", ".pyi") else path
        if folder not in by_folder:
            found = discover_settings(path)
            by_folder[folder] = (found.root, found.config)
        if first is None:
            first = by_folder[folder]
        elif by_folder[folder][1] != first[1]:
            raise UserError(
                f"{paths[0]} and {path} are checked with different settings ({first[1] or 'the defaults'}, "
                f"{by_folder[folder][1] or 'the defaults'}): check each project on its own, or pass --config"
            )


# The formats `--statistics` can print its table in (ruff's: its table in the terminal formats but grouped, or JSON).
STATISTICS_FORMATS = ("concise", "text", "full", "json")


def _output_format(args: argparse.Namespace, settings: Settings) -> str:
    """As ruff decides it: `--output-format`, else SPECGUARD_OUTPUT_FORMAT (ruff's RUFF_OUTPUT_FORMAT), else the
    configuration's `output-format`, else concise."""
    chosen, origin = args.output_format, "--output-format"
    if chosen is None and os.environ.get("SPECGUARD_OUTPUT_FORMAT"):
        chosen, origin = os.environ["SPECGUARD_OUTPUT_FORMAT"], "SPECGUARD_OUTPUT_FORMAT"
    if chosen is None and settings.output_format is not None:
        chosen, origin = settings.output_format, "[tool.specguard] output-format"
    chosen = chosen or "concise"
    if chosen not in OUTPUT_FORMATS:
        raise UserError(f"{origin} '{chosen}': not an output format; choose one of {', '.join(OUTPUT_FORMATS)}")
    if args.statistics and chosen not in STATISTICS_FORMATS:
        raise UserError(f"--statistics prints counts as concise, full or json, not {chosen}; drop one of the two")
    return chosen


def run_check(args: argparse.Namespace) -> int:
    """`specguard check PATH...` (cli.py sends `-` and `--stdin-filename` to check_stdin.py instead)."""
    from specguard._files import holding

    paths: list[Path] = list(args.paths) or ([] if args.vllm else [Path(".")])
    if args.vllm:
        paths.append(_installed_vllm())
    # each folder named, then the project's root, held from before the walk to the last write
    with holding(paths):
        settings = settings_for(args, paths)
        with holding([settings.root]):
            return _check(args, paths, settings)


def _check(args: argparse.Namespace, paths: list[Path], settings: Settings) -> int:
    from specguard.analysis.baseline import write_baseline
    from specguard.composition import check_paths
    from specguard.settings import require_cache_inside_project

    if args.show_files or args.show_settings:
        return _show(args, paths, settings)  # they check nothing and write nothing: they show what would be
    reject_empty_selection(settings)
    if args.cache_dir is None and not args.no_cache:
        require_cache_inside_project(settings)  # --cache-dir is the user's choice, anywhere; the project's is not

    result = unselected_source_errors(check_paths(paths, settings, use_cache=not args.no_cache), settings)
    if not result.files and not result.findings:
        result.warnings.append("no Python files found under the given paths")
    if args.add_noqa:
        return _add_noqa(args, paths, settings, result)
    applied: list[Finding] = []
    if args.diff or settings.fix:
        result, applied = _run_fixes(args, paths, settings, result)
        if args.diff:
            return EXIT_ERROR if result.errors else EXIT_FINDINGS if applied and not args.exit_zero else EXIT_CLEAN
    if args.write_baseline:
        write_baseline(args.write_baseline, result.findings, settings, result.line)
    findings = offered_fixes(reported(args, result, settings), settings)
    emit_report(report_text(args, findings, settings, applied), args, settings.root)
    tell_run(args, result, settings)
    return exit_code(args, result, findings, len(applied))


def unselected_source_errors(result: CheckResult, settings: Settings) -> CheckResult:
    """A file that cannot be read is an SG000 finding where the selection enables SG000 (it does unless told
    otherwise); where it does not, a warning naming it, as ruff's `Failed to lint` when E902 is not selected."""
    if "SG000" in settings.enabled(["SG000"]):
        return result
    for f in result.findings:
        if f.code == "SG000":
            result.warnings.append(f"{f.path}: not checked: {f.message} (SG000 is not selected)")
    result.findings = [f for f in result.findings if f.code != "SG000"]
    return result


def reported(args: argparse.Namespace, result: CheckResult, settings: Settings) -> list[Finding]:
    """The findings a run reports: those `--baseline` does not record."""
    from specguard.analysis.baseline import filter_baseline, read_baseline

    if not args.baseline:
        return result.findings
    return filter_baseline(result.findings, read_baseline(args.baseline), settings, result.line)


def exit_code(args: argparse.Namespace, result: CheckResult, findings: list[Finding], fixed: int) -> int:
    """2 for an error; 0 where asked (--exit-zero) or for a baseline recorded (a success, as ruff's --add-noqa
    is); else 1 for findings left, or for fixes made under --exit-non-zero-on-fix."""
    if result.errors:
        return EXIT_ERROR
    if args.write_baseline or args.exit_zero:
        return EXIT_CLEAN
    return EXIT_FINDINGS if findings or (fixed and args.exit_non_zero_on_fix) else EXIT_CLEAN


def _add_noqa(args: argparse.Namespace, paths: list[Path], settings: Settings, result: CheckResult) -> int:
    """`--add-noqa`: the reported findings' codes into noqa comments on their lines, written as fixes are (only
    beneath the paths checked, never through a link out); ruff's count on stderr, exit 0 (2 for an error)."""
    from specguard.analysis.suppress import line_codes
    from specguard.fixes.apply import FixReport, edit_files
    from specguard.fixes.noqa import add_noqa

    by_path: dict[str, list[Finding]] = {}
    for finding in reported(args, result, settings):
        if finding.code != "SG000":
            by_path.setdefault(finding.path, []).append(finding)

    def edit(path: str, text: str):  # type: ignore[no-untyped-def]
        return add_noqa(path, text, by_path[path], line_codes)

    assert result.project is not None
    report = edit_files(
        result.project, sorted(by_path), edit, FixReport(), write=True, inside=paths, undone="no noqa added"
    )
    for note in [] if args.quiet or args.silent else report.notes:
        tell(f"specguard: warning: {note}")
    tell_run(args, result, settings)
    # a directive per line changed (a noqa comment only ever changes its own line)
    added = sum(
        a != b
        for before, after in report.changed.values()
        for a, b in zip(before.splitlines(), after.splitlines(), strict=True)
    )
    if added and not args.silent:  # as ruff: nothing said when nothing was added
        tell(f"Added {added} noqa directive{'' if added == 1 else 's'}.")
    return EXIT_ERROR if result.errors else EXIT_CLEAN


def report_text(
    args: argparse.Namespace,
    findings: list[Finding],
    settings: Settings,
    applied: list[Finding],
    given: dict[str, str] | None = None,
) -> str:
    """The report in the format asked for; `applied` are the findings `--fix` fixed, `given` the sources that are
    not on disk (standard input's)."""
    from specguard.console import colour_wanted
    from specguard.report import formats, text
    from specguard.rules import rule_names

    if args.statistics and args.output_format != "json":
        return text.statistics(findings, rule_names(), settings.unsafe_fixes, quiet=args.quiet)
    if args.statistics:
        from specguard.report import json_format

        return json_format.statistics(text.rule_counts(findings, rule_names(), settings.unsafe_fixes))
    colour = args.output_file is None and colour_wanted()
    made = text.fixes_made(applied, rule_names()) if args.show_fixes else []
    report = formats.Report(settings.unsafe_fixes, len(applied), args.quiet, colour, settings.root, made, given or {})
    return formats.render(args.output_format, findings, report)


def tell_run(args: argparse.Namespace, result: CheckResult, settings: Settings) -> None:
    """What the run says besides the report, on stderr: notes, the sites not decided and warnings (not with -q or
    -s), errors (always)."""
    if not (args.quiet or args.silent):
        for note in result.notes:
            tell(f"specguard: note: {note}")
        _not_judged(result, settings, args.statistics)
        _undecided(result, settings, args.verbose, args.statistics)
        for warning in result.warnings:
            tell(f"specguard: warning: {warning}")
    for error in result.errors:
        tell(f"specguard: error: {error}")


def _not_judged(result: CheckResult, settings: Settings, statistics: bool) -> None:
    """Files over the per-file budget were not judged at all: each is named, and `--statistics` counts them."""
    for path, why in result.not_judged:
        tell(f"specguard: note: {settings.relative(path)}: not judged: {why}")
    if result.not_judged and statistics:
        count = len(result.not_judged)
        files = "1 file was" if count == 1 else f"{count} files were"
        tell(f"specguard: note: {files} not judged (too large for the budget)")


def _undecided(result: CheckResult, settings: Settings, verbose: bool, statistics: bool) -> None:
    """Sites the rules could not decide are no findings, and never silent: `--statistics` counts them, `-v` lists
    them (on stderr, so the report keeps its format)."""
    from collections import Counter

    if not result.undecided or not (verbose or statistics):
        return
    counts = Counter(j.code for _, j in result.undecided)
    per_rule = ", ".join(f"{code} {n}" for code, n in sorted(counts.items()))
    sites = "site was" if len(result.undecided) == 1 else "sites were"
    hint = "" if verbose else "; -v lists them"
    tell(f"specguard: note: {len(result.undecided)} {sites} not decided ({per_rule}){hint}")
    if verbose:
        for path, j in result.undecided:
            where = f"{settings.relative(path)}:{j.span[0]}"
            tell(f"specguard: not decided: {where}: {j.code} `{j.scope}`: {j.message}: {j.why}")


def _show(args: argparse.Namespace, paths: list[Path], settings: Settings) -> int:
    """`--show-files` (every file the settings select, sorted, absolute) or `--show-settings` (the settings the
    first of them is checked with), as ruff prints them."""
    from specguard.analysis.engine import discover_files
    from specguard.report.settings_view import render_settings
    from specguard.settings import find_pyproject

    found = discover_files(paths, settings)
    for note in [] if args.quiet or args.silent else found.notes:
        tell(f"specguard: note: {note}")
    for warning in [] if args.quiet or args.silent else found.warnings:
        tell(f"specguard: warning: {warning}")
    for error in found.errors:
        tell(f"specguard: error: {error}")
    for path, why in found.unreadable:  # as ruff: the path is left out, and said
        tell(f"specguard: warning: {shown(path)}: {why}")
    files = sorted(os.path.abspath(f) for f in found.files)
    if args.show_settings:
        if not files:
            raise UserError("no Python files found under the given paths; --show-settings shows a file's settings")
        source = args.config if args.config is not None else find_pyproject(paths[0])
        emit_report(render_settings(settings, Path(files[0]), source, args), args, settings.root)
    else:
        if not files and not (args.quiet or args.silent):
            tell("specguard: warning: no Python files found under the given paths")
        emit_report("\n".join(shown(f) for f in files), args, settings.root)
    return EXIT_ERROR if found.errors else EXIT_CLEAN


def fix_policy(settings):  # type: ignore[no-untyped-def]
    from specguard.fixes.apply import FixPolicy

    return FixPolicy(settings.unsafe_fixes, settings.is_fixable)


def offered_fixes(findings: list, settings) -> list:  # type: ignore[no-untyped-def]
    """The findings as reported: an unfixable code's finding shows no fix, as in ruff."""
    policy = fix_policy(settings)
    return [dataclasses.replace(f, fix=policy.offered(f)) if f.fix else f for f in findings]


def _run_fixes(args: argparse.Namespace, paths: list[Path], settings, result):  # type: ignore[no-untyped-def]
    """`--fix` or `--diff` on the reported findings. `--diff` prints the diffs and the count it would fix;
    `--fix` writes the files and checks again, so the report shows what remains, where it now is."""
    from specguard.composition import check_paths
    from specguard.fixes.apply import fix_files, unified_diff
    from specguard.report.text import diff_summary

    shown_now = reported(args, result, settings)
    outcome = fix_files(result.project, shown_now, fix_policy(settings), write=not args.diff, inside=paths)
    for note in [] if args.quiet or args.silent else outcome.notes:
        tell(f"specguard: warning: {note}")
    if args.diff:
        diffs = [unified_diff(shown(path), *texts) for path, texts in sorted(outcome.changed.items())]
        summary = diff_summary(outcome.fixed, offered_fixes(shown_now, settings), settings.unsafe_fixes)
        emit_diff(diffs, "" if args.quiet or args.silent else summary, args, settings.root)
        tell_run(args, result, settings)
        return result, outcome.applied
    if outcome.changed:
        result = unselected_source_errors(check_paths(paths, settings, use_cache=not args.no_cache), settings)
    return result, outcome.applied


def _reject_unknown_codes(settings: Settings) -> None:
    """Every code or prefix named anywhere (per-file-ignores too) must name a rule."""
    from specguard.rules import ALL_CODES

    known = ["SG000", *ALL_CODES, "ALL"]
    for selector in settings.selectors():
        if not selector or not any(code.startswith(selector) for code in known):
            raise UserError(f"unknown rule selector '{selector}'; see `specguard rules`")


def reject_empty_selection(settings: Settings) -> None:
    """Some rule must run: a check of nothing would pass any CI gate. (--show-settings may show an empty selection:
    that is how one finds out why it is empty.)"""
    from specguard.rules import ALL_CODES

    if not settings.enabled(ALL_CODES) and not _selects_source_errors(settings):
        but = (
            " but SG000 (select it by name to check only that files can be read)" if settings.enabled(["SG000"]) else ""
        )
        raise UserError(
            f"the selection enables no rule{but} (select, extend-select and ignore leave none): the check would "
            "check nothing; see `specguard rules`"
        )


def _selects_source_errors(settings: Settings) -> bool:
    """Whether SG000 runs because a selector names it (`--select SG000`), not only because `ALL` takes it along: a
    check of nothing but unreadable files is one the user asked for."""
    cli = settings.cli_rules
    layers = [settings.select or [], settings.extend_select, cli.select or [], cli.extend_select]
    named = any(s != "ALL" and "SG000".startswith(s) for layer in layers for s in layer)
    return named and "SG000" in settings.enabled(["SG000"])


def emit_diff(diffs: list[str], summary: str, args: argparse.Namespace, root: Path) -> None:
    """`--diff`'s diffs, each with a blank line after it, then `summary` (if any), as ruff lays them out; printed
    under `-s` too, as ruff's."""
    text = "".join(diff + "\n" for diff in diffs) + (summary + "\n" if summary else "")
    emit_report(text.removesuffix("\n"), args, root, silenced=False)


def emit_report(report: str, args: argparse.Namespace, root: Path, *, silenced: bool = True) -> None:
    """The report to stdout or `--output-file`; nothing with `--silent` (whose output file is left empty, as ruff's)
    unless it is not `silenced` (`--diff`'s diffs, which ruff prints under `-s` too).
    An output file inside the project (`root`) is opened beneath a handle on its root (no link leads it out, nor a
    folder swapped for one meanwhile); one elsewhere (`/dev/stdout`, a CI folder) as named. Missing folders on
    the way are made, as ruff makes them (`-o reports/specguard.sarif`)."""
    from specguard._files import OutsideTree, locate_beneath, open_folder, relative_inside

    if args.silent and silenced:
        report = ""
    output: Path | None = args.output_file
    if output is None:
        if report:
            emit(report)
        return
    text = report + "\n" if report else ""
    relative = relative_inside(output, root)
    try:
        # The formats write valid Unicode; backslashreplace only keeps a slip of ours from costing the report.
        if relative is None:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(text, encoding="utf-8", errors="backslashreplace")
            return
        base = open_folder(root)
        try:
            folder, _, fd = locate_beneath(base, relative, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, make_folders=True)
            os.close(folder)
        finally:
            os.close(base)
        with open(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
    except OutsideTree as exc:
        raise UserError(f"{output}: cannot write report: {exc.how} leads outside the project") from None
    except OSError as exc:
        raise UserError(f"{output}: cannot write report: {exc.strerror or exc}") from None
