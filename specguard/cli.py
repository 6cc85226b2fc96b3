"""The command line: check, rules, explain, config, doctor. Errors become one line and exit code 2."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from specguard import __version__
from specguard.console import emit
from specguard.errors import UserError

if TYPE_CHECKING:
    from specguard.analysis.findings import Finding

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specguard",
        description="Keeps vLLM speculative decoding from breaking silently.",
        epilog="Exit codes: 0 no findings, 1 findings, 2 error.",
    )
    parser.add_argument("--version", action="version", version=f"specguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser("check", help="analyze Python files for speculator metadata bugs")
    check.add_argument("paths", nargs="*", type=Path, help="files or folders (default: .)")
    check.add_argument("--vllm", action="store_true", help="also analyze the vLLM installed in this environment")
    check.add_argument("--format", choices=["text", "json", "sarif", "github"], default="text")
    check.add_argument("--config", type=Path, help="a pyproject.toml or TOML file to read settings from")
    check.add_argument("--select", help="comma-separated codes or prefixes to run (default: all)")
    check.add_argument("--ignore", help="comma-separated codes or prefixes to skip")
    check.add_argument("--extend-select", help="codes to run in addition to the selected ones")
    check.add_argument("--rule-pack", action="append", type=Path, default=[], help="an extra rule pack (TOML)")
    check.add_argument(
        "--statistics", action="store_true", help="print the number of findings per rule (text or json format)"
    )
    check.add_argument(
        "--force-exclude",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="apply `exclude` to files named on the command line too (what the pre-commit hook passes)",
    )
    check.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    check.add_argument("--cache-dir", type=Path, help="where to keep the cache (default: .specguard_cache)")
    check.add_argument("--baseline", type=Path, help="ignore the findings recorded in this file")
    check.add_argument("--write-baseline", type=Path, help="record the current findings in this file")
    check.add_argument("--output", type=Path, help="write the report to this file instead of stdout")
    fix = check.add_argument_group("fixes (as in ruff)")
    fix.add_argument("--fix", action=argparse.BooleanOptionalAction, help="apply safe fixes in place")
    fix.add_argument(
        "--unsafe-fixes",
        action=argparse.BooleanOptionalAction,
        help="also apply unsafe fixes (alone: show them as available)",
    )
    fix.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
    fix.add_argument("--fixable", help="comma-separated codes or prefixes that may be fixed (default: all)")
    fix.add_argument("--unfixable", help="comma-separated codes or prefixes never to fix")

    sub.add_parser("rules", help="list the rules")
    explain = sub.add_parser("explain", help="print a rule's documentation")
    explain.add_argument("code", help="a rule code, e.g. SG103")
    sub.add_parser("config", help="pre-flight a vLLM serving config (see `specguard config --help`)", add_help=False)
    sub.add_parser("doctor", help="show the environment as specguard sees it", add_help=False)
    return parser


def _codes(value: str | None, flag: str) -> list[str] | None:
    """A comma-separated option's codes; an empty one is an error (`--select ''` used to check nothing)."""
    if value is None:
        return None
    codes = [c.strip() for c in value.split(",")]
    if not all(codes):
        raise UserError(
            f"{flag} {value!r}: an empty rule code; give codes or prefixes separated by commas, e.g. {flag} SG101,SG2 "
            "(`specguard rules` lists them)"
        )
    return codes


def _installed_vllm() -> Path:
    from specguard.analysis.modules import installed_roots

    roots = [root / "vllm" for root in installed_roots("vllm")]  # located, not imported
    if not roots or not roots[0].is_dir():
        raise UserError("--vllm: no vLLM is installed in this environment (pip install vllm, or pass its path)")
    return roots[0]


def run_check(args: argparse.Namespace) -> int:
    from specguard.analysis.baseline import filter_baseline, read_baseline, write_baseline
    from specguard.analysis.engine import check_paths
    from specguard.report import FORMATS, text
    from specguard.settings import load_settings, require_cache_inside_project

    if args.statistics and args.format not in ("text", "json"):
        raise UserError(f"--statistics prints counts as text or json, not {args.format}; drop one of the two")
    paths: list[Path] = list(args.paths) or ([] if args.vllm else [Path(".")])
    if args.vllm:
        paths.append(_installed_vllm())
    settings = load_settings(args.config, paths[0])
    updates: dict = {}
    for key in ("select", "ignore", "extend_select", "fixable", "unfixable"):
        if (value := _codes(getattr(args, key), "--" + key.replace("_", "-"))) is not None:
            updates[key] = value
    for key in ("fix", "unsafe_fixes"):
        if getattr(args, key) is not None:
            updates[key] = getattr(args, key)
    if args.rule_pack:
        updates["rule_packs"] = [*settings.rule_packs, *args.rule_pack]
    if args.cache_dir:
        updates["cache_dir"] = args.cache_dir  # the user's choice, anywhere
    elif not args.no_cache:
        require_cache_inside_project(settings)
    if args.force_exclude is not None:
        updates["force_exclude"] = args.force_exclude
    if updates:
        settings = dataclasses.replace(settings, **updates)
    _reject_unknown_codes(settings)

    result = check_paths(paths, settings, use_cache=not args.no_cache)
    fixed = 0
    if args.diff or settings.fix:
        result, fixed = _run_fixes(args, paths, settings, result)
        if args.diff:
            return EXIT_ERROR if result.errors else EXIT_FINDINGS if fixed else EXIT_CLEAN
    findings = result.findings
    if args.write_baseline:
        write_baseline(args.write_baseline, findings, settings, result.line)
    if args.baseline:
        findings = filter_baseline(findings, read_baseline(args.baseline), settings, result.line)

    findings = _offered_fixes(findings, settings)
    if args.statistics:
        report = _statistics(findings, args.format, settings.unsafe_fixes)
    elif args.format == "text":
        report = text.render(findings, settings.unsafe_fixes, fixed)
    else:
        report = FORMATS[args.format](findings)
    _emit(report, args.output)
    for note in result.notes:
        print(f"specguard: note: {note}", file=sys.stderr)
    for error in result.errors:
        print(f"specguard: error: {error}", file=sys.stderr)
    if result.errors:
        return EXIT_ERROR
    if args.write_baseline:
        return EXIT_CLEAN  # the findings were recorded as asked: a success, as ruff's --add-noqa is
    return EXIT_FINDINGS if findings else EXIT_CLEAN


def _statistics(findings: list[Finding], output_format: str, unsafe_fixes: bool | None) -> str:
    """Counts per rule: ruff's text table, or its JSON (`code`, `name`, `count`, `fixable`...)."""
    from collections import Counter

    from specguard.report.text import statistics
    from specguard.rules import ALL_CODES, load_rule

    names = {"SG000": "source-error", **{c: load_rule(c).name for c in ALL_CODES}}
    if output_format == "text":
        return statistics(findings, names)
    import json

    counts = Counter(f.code for f in findings).most_common()
    fixable = Counter(f.code for f in findings if f.fix is not None and f.fix.applies(unsafe_fixes))
    rows = [
        {"code": c, "name": names.get(c, ""), "count": n, "fixable": fixable[c] > 0, "fixable_count": fixable[c]}
        for c, n in counts
    ]
    return json.dumps(rows, indent=2)


def _fix_policy(settings):  # type: ignore[no-untyped-def]
    from specguard.fixes.apply import FixPolicy

    return FixPolicy(settings.unsafe_fixes, settings.is_fixable)


def _offered_fixes(findings: list, settings) -> list:  # type: ignore[no-untyped-def]
    """The findings as reported: an unfixable code's finding shows no fix, as in ruff."""
    if settings.fixable is None and not settings.unfixable:
        return findings
    policy = _fix_policy(settings)
    return [dataclasses.replace(f, fix=policy.offered(f)) if f.fix else f for f in findings]


def _run_fixes(args: argparse.Namespace, paths: list[Path], settings, result):  # type: ignore[no-untyped-def]
    """`--fix` or `--diff` on the reported findings. `--diff` prints the diffs and the count it would fix;
    `--fix` writes the files and checks again, so the report shows what remains, where it now is."""
    from specguard.analysis.baseline import filter_baseline, read_baseline
    from specguard.analysis.engine import check_paths
    from specguard.fixes.apply import fix_files, unified_diff
    from specguard.report.text import diff_summary

    reported = result.findings
    if args.baseline:
        reported = filter_baseline(reported, read_baseline(args.baseline), settings, result.line)
    outcome = fix_files(result.project, reported, _fix_policy(settings), write=not args.diff, inside=paths)
    for note in outcome.notes:
        print(f"specguard: warning: {note}", file=sys.stderr)
    if args.diff:
        diffs = [unified_diff(path, *texts) for path, texts in sorted(outcome.changed.items())]
        summary = diff_summary(outcome.fixed, _offered_fixes(reported, settings), settings.unsafe_fixes)
        _emit("\n".join([*diffs, summary]).strip("\n"), args.output)
        for note in result.notes:
            print(f"specguard: note: {note}", file=sys.stderr)
        for error in result.errors:
            print(f"specguard: error: {error}", file=sys.stderr)
        return result, outcome.fixed
    if outcome.changed:
        result = check_paths(paths, settings, use_cache=not args.no_cache)
    return result, outcome.fixed


def _reject_unknown_codes(settings) -> None:  # type: ignore[no-untyped-def]
    """Every code or prefix named anywhere (per-file-ignores too) must name a rule, and some rule must run."""
    from specguard.rules import ALL_CODES

    known = ["SG000", *ALL_CODES, "ALL"]
    for selector in settings.selectors():
        if not selector or not any(code.startswith(selector) for code in known):
            raise UserError(f"unknown rule selector '{selector}'; see `specguard rules`")
    if not settings.enabled(ALL_CODES):
        raise UserError(
            "the selection enables no rule (select, extend-select and ignore leave none): the check would check "
            "nothing; see `specguard rules`"
        )


def _emit(report: str, output: Path | None) -> None:
    if output is None:
        if report:
            emit(report)
        return
    try:
        output.write_text(report + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{output}: cannot write report: {exc.strerror or exc}") from None


def run_rules() -> int:
    from specguard.rules import all_rules

    lines = [
        f"{'code':<6}  {'name':<26}  what it flags",
        f"{'SG000':<6}  {'source-error':<26}  file cannot be read, decoded or parsed",
        *(f"{rule.code:<6}  {rule.name:<26}  {rule.title}" for rule in all_rules().values()),
    ]
    emit("\n".join(lines))
    return EXIT_CLEAN


def run_explain(code: str) -> int:
    from specguard.rules import ALL_CODES, SOURCE_ERROR_DOCS, load_rule

    code = code.upper()
    if code == "SG000":
        emit(SOURCE_ERROR_DOCS)
    elif code in ALL_CODES:
        emit(load_rule(code).docs())
    else:
        raise UserError(f"unknown rule '{code}'; known: SG000, {', '.join(ALL_CODES)}")
    return EXIT_CLEAN


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # config and doctor own their argument parsing (config passes `vllm serve` arguments through after --).
    if argv and argv[0] in ("config", "doctor"):
        from specguard.deploy import cli as deploy_cli

        return deploy_cli.config_main(argv[1:]) if argv[0] == "config" else deploy_cli.doctor_main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        if args.command == "check":
            return run_check(args)
        if args.command == "rules":
            return run_rules()
        if args.command == "explain":
            return run_explain(args.code)
        _parser().print_help()
        return EXIT_ERROR
    except UserError as exc:
        print(f"specguard: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # an internal error still gets one line, never a traceback
        print(
            f"specguard: internal error: {type(exc).__name__}: {exc} "
            f"(please report it; rerun with SPECGUARD_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        if _debug():
            raise
        return EXIT_ERROR


def _debug() -> bool:
    import os

    return os.environ.get("SPECGUARD_DEBUG", "") not in ("", "0")


if __name__ == "__main__":
    raise SystemExit(main())
