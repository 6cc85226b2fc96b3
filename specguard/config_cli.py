"""Entry points for `specguard config` and `specguard doctor` (the top-level CLI dispatches here).

Each owns its argparse and turns every UserError into one line on stderr and exit code 2. They compose: the
pre-flight (deploy/) is handed how to run `specguard check` over the served tree (`composition.check_served_tree`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import NoReturn

from specguard.console import emit, tell
from specguard.deploy.tree_check import TreeCheck
from specguard.errors import UserError

CONFIG_USAGE = """specguard config FILE.yaml [--vllm-source DIR | --vllm-version X.Y.Z] [--require-source] [--strict]
                        [--env KEY=VALUE ...] [--format text|json] [-v] [--hazards FILE]
       specguard config [options] [FILE.yaml] -- <vllm serve arguments>"""


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage as a UserError (one line, exit 2) instead of printing usage."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{self.prog}: {message}")


def _config_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="specguard config",
        usage=CONFIG_USAGE,
        description=(
            "Pre-flight a vLLM serving config against the hazards of the vLLM source it will run. "
            "Exit 0: no hazard found; 1: hazards found; 2: error; 3: with --strict, some hazard was not judged "
            "(and none was found)."
        ),
    )
    parser.add_argument("file", nargs="?", help="a config in the format `vllm serve --config FILE` reads")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--vllm-source",
        metavar="DIR",
        help="the vllm/ package dir to judge against (default: the vLLM installed in this environment)",
    )
    source.add_argument(
        "--vllm-version",
        metavar="X.Y.Z",
        help="judge against this vLLM release: its wheel is downloaded once with pip (nothing installed, nothing "
        "run) and its Python files kept in the user cache",
    )
    parser.add_argument(
        "--require-source",
        action="store_true",
        help="exit 2 when no vLLM source is found (without one, no hazard can be judged)",
    )
    parser.add_argument(
        "--env",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="an environment variable of the serving environment (repeatable); the code paths vLLM picks from its "
        "environment are judged with these and this process's environment",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 3 when some hazard could not be judged (a CI gate that never passes a config it did not judge)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also list the variables that were unset in the serving environment where they decided a verdict",
    )
    parser.add_argument("--hazards", metavar="FILE", help="a hazard catalogue to use instead of the built-in one")
    return parser


def _run_config(argv: list[str]) -> int:
    from specguard.evaluation.budget import run_budget
    from specguard.evaluation.environment import served_environment

    if "--" in argv:
        split = argv.index("--")
        ours, serve_args = argv[:split], argv[split + 1 :]
    else:
        ours, serve_args = argv, None
    args = _config_parser().parse_args(ours)
    if args.file is None and serve_args is None:
        raise UserError("specguard config: give a config FILE.yaml, or `--` followed by vllm serve arguments")

    served = dict(os.environ)
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key or any(c.isspace() for c in key):
            raise UserError(f"specguard config: --env expects KEY=VALUE, got {item!r}")
        served[key] = value
    # One budget for every evaluation of the served source this run makes; the serving environment it reads.
    with run_budget(), served_environment(served):
        return _judge(args, serve_args)


def _check_served_tree(root: Path) -> TreeCheck:
    """What deploy/ is handed to run `specguard check` over the served tree; the analyzer loads only when a hazard
    needs a finding, not for every config."""
    from specguard.composition import check_served_tree

    return check_served_tree(root)


def _judge(args: argparse.Namespace, serve_args: list[str] | None) -> int:
    from specguard.deploy.catalogue import load_catalogue
    from specguard.deploy.facts import open_source
    from specguard.deploy.hazards import evaluate
    from specguard.deploy.load import load
    from specguard.deploy.report import not_judged_line, notes, to_json, to_text

    catalogue = load_catalogue(Path(args.hazards) if args.hazards else None)
    if args.vllm_version is not None:
        from specguard.deploy.release import release_source

        args.vllm_source = str(release_source(args.vllm_version))
    facts = open_source(args.vllm_source, _check_served_tree)
    if facts is None and args.require_source:
        raise UserError(
            f"specguard config: no vLLM source found (pass --vllm-source DIR, or install vllm here); "
            f"all {len(catalogue.hazards)} hazards would go unjudged: each is decided by the served source"
        )
    # Like `vllm serve ARGS --config FILE`: the file's options go before the arguments, which override them.
    loaded = load(args.file, serve_args, facts)
    judgement = evaluate(loaded.config, catalogue, facts)
    judgement.notes[:0] = loaded.notes

    if args.format == "json":
        emit(to_json(judgement))
        for note in notes(judgement, args.verbose):
            tell(f"specguard config: note: {note}")
        if judgement.not_judged:
            tell(f"specguard config: {not_judged_line(judgement)}")
    else:
        emit(to_text(judgement, loaded.origin, args.verbose))
    if judgement.findings:
        return 1
    return 3 if args.strict and judgement.not_judged else 0


def config_main(argv: list[str]) -> int:
    """`specguard config ...` (argv without the subcommand name)."""
    try:
        return _run_config(list(argv))
    except UserError as exc:
        tell(f"specguard: error: {exc}")
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)


def _doctor_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="specguard doctor",
        description=(
            "Print the environment as specguard sees it: vLLM, FlashInfer and torch versions, a summary of "
            "`specguard check` on the installed vLLM, and which runtime-guard checks would install."
        ),
    )
    parser.add_argument(
        "--vllm-source",
        metavar="DIR",
        help="summarize `specguard check` on this vllm/ dir instead of the installed one",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    return parser


def doctor_main(argv: list[str]) -> int:
    """`specguard doctor ...` (argv without the subcommand name)."""
    from specguard.deploy.doctor import diagnose, to_json, to_text

    try:
        args = _doctor_parser().parse_args(list(argv))
        report = diagnose(_check_served_tree, args.vllm_source)
    except UserError as exc:
        tell(f"specguard: error: {exc}")
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    emit(to_json(report) if args.format == "json" else to_text(report))
    return 0
