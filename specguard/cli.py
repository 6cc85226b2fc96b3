"""The command line: check, rules, explain, clean, config, doctor. Errors become one line and exit code 2."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from specguard import __version__, check_cli
from specguard.check_cli import EXIT_CLEAN, EXIT_ERROR
from specguard.console import emit, tell
from specguard.errors import UserError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specguard",
        description="Keeps vLLM speculative decoding from breaking silently.",
        epilog="Exit codes: 0 no findings, 1 findings, 2 error.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"specguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    check_cli.add_options(sub.add_parser("check", help="analyze Python files for speculator metadata bugs"))

    sub.add_parser("rules", help="list the rules")
    sub.add_parser("version", help="print specguard's version (as --version)")
    explain = sub.add_parser("explain", aliases=["rule"], help="print a rule's documentation (`rule` as ruff's)")
    explain.add_argument("code", help="a rule's code or name, e.g. SG103 or padded-token-count")
    clean = sub.add_parser("clean", help="remove the cache folders specguard wrote here and below")
    clean.add_argument("-q", "--quiet", action="store_true", help="do not name the folders removed")
    sub.add_parser("config", help="pre-flight a vLLM serving config (see `specguard config --help`)", add_help=False)
    sub.add_parser("doctor", help="show the environment as specguard sees it", add_help=False)
    return parser


def run_rules() -> int:
    from specguard.rules import SOURCE_ERROR_TITLE, all_rules

    lines = [
        f"{'code':<6}  {'name':<26}  what it flags",
        f"{'SG000':<6}  {'source-error':<26}  {SOURCE_ERROR_TITLE}",
        *(f"{rule.code:<6}  {rule.name:<26}  {rule.title}" for rule in all_rules().values()),
    ]
    emit("\n".join(lines))
    return EXIT_CLEAN


def run_explain(rule: str) -> int:
    """A rule's documentation, by its code or its name (as `ruff rule` takes either)."""
    import difflib

    from specguard.rules import SOURCE_ERROR_DOCS, load_rule, rule_names

    by_name = {name: code for code, name in rule_names().items()}
    wanted = rule.strip()
    code = wanted.upper() if wanted.upper() in rule_names() else by_name.get(wanted.lower())
    if code is None:
        close = difflib.get_close_matches(wanted.lower(), [*by_name, *(c.lower() for c in by_name.values())], n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise UserError(f"unknown rule '{rule}'{hint} (`specguard rules` lists every code and name)")
    emit(SOURCE_ERROR_DOCS if code == "SG000" else load_rule(code).docs())
    return EXIT_CLEAN


def run_clean(quiet: bool) -> int:
    """Remove every `.specguard_cache` here and below, and the configured `cache-dir`: only what specguard wrote."""
    from specguard._files import open_folder
    from specguard.analysis.cache_clean import Cleaned, cache_folders, clean
    from specguard.settings import cache_outside_project, load_settings

    here = Path(".")
    folders = list(cache_folders(here))
    warnings: list[str] = []
    settings = load_settings(None, here, warnings)
    configured, result = settings.cache_dir, Cleaned()
    if configured is not None and (real := cache_outside_project(settings)) is not None:
        # check never writes there (a project's cache-dir must lie inside it), so nothing there is this project's
        result.left.append(f"{configured}: the configured cache-dir lies outside the project (at {real}); left alone")
    elif configured is not None and configured.resolve() not in {f.resolve() for f in folders}:
        folders.append(configured)
    # each folder is walked beneath the folder it was found in (here) or configured for (the project's root)
    roots = {os.path.abspath(here), os.path.abspath(settings.root)}
    held = {root: open_folder(root) for root in roots}
    try:
        for folder in folders:
            root = os.path.abspath(settings.root if folder.is_absolute() else here)
            try:
                clean(folder, result, held[root], os.path.relpath(os.path.abspath(folder), root))
            except OSError as exc:
                raise UserError(f"{folder}: cannot remove the cache: {exc.strerror or exc}") from None
    finally:
        for fd in held.values():
            os.close(fd)
    for folder in [] if quiet else result.removed:
        tell(f"Removing cache at: {os.path.relpath(folder)}")
    for left in [*warnings, *result.left]:
        tell(f"specguard: warning: {left}")
    return EXIT_CLEAN


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # config and doctor own their argument parsing (config passes `vllm serve` arguments through after --).
    if argv and argv[0] in ("config", "doctor"):
        from specguard import config_cli

        return config_cli.config_main(argv[1:]) if argv[0] == "config" else config_cli.doctor_main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        if args.command == "check":
            from specguard import check_stdin

            return check_stdin.run_stdin(args) if check_stdin.reads_stdin(args) else check_cli.run_check(args)
        if args.command == "rules":
            return run_rules()
        if args.command in ("explain", "rule"):
            return run_explain(args.code)
        if args.command == "version":
            emit(f"specguard {__version__}")
            return EXIT_CLEAN
        if args.command == "clean":
            return run_clean(args.quiet)
        _parser().print_help()
        return EXIT_ERROR
    except UserError as exc:
        tell(f"specguard: error: {exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # an internal error still gets one line, never a traceback
        tell(
            f"specguard: internal error: {type(exc).__name__}: {exc} "
            f"(please report it; rerun with SPECGUARD_DEBUG=1 for the traceback)"
        )
        if _debug():
            raise
        return EXIT_ERROR


def run() -> NoReturn:
    """The `specguard` command: main(), then leave without tearing the interpreter down.

    A check builds many short-lived objects (syntax trees, the project index, the evaluator's values). Looking
    for reference cycles among them every 700 allocations, and freeing them one by one at exit, cost a tenth of
    a cold run on a large tree; so the command collects less often, and once its output is flushed it leaves
    with os._exit (nothing of specguard's runs at exit: its files are written and closed before main returns).
    """
    gc.set_threshold(20_000, 50, 100)
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        code = _exit_code(exc.code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError):  # a reader that went away, a closed stream
            stream.flush()
    os._exit(code)


def _exit_code(code: object) -> int:
    """What the interpreter would exit with for SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _debug() -> bool:
    return os.environ.get("SPECGUARD_DEBUG", "") not in ("", "0")


if __name__ == "__main__":
    run()
