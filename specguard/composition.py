"""A check composed: the settings' rule packs loaded and the rules selected, handed to the engine.

The one place that knows both the engine (`analysis/`) and what it runs (`rules/`, `packs.py`); the command line
checks through it, the config pre-flight's hazards and `specguard doctor` are handed `check_served_tree`, and the
tests use both.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from specguard.analysis import engine
from specguard.findings import Finding, Judgement
from specguard.fixes.line_length import DEFAULT as DEFAULT_LINE_LENGTH
from specguard.packs import Pack, check_builtin_packs, load_pack, packs_for
from specguard.rules import RuleSet
from specguard.settings import Settings, served_tree_settings

if TYPE_CHECKING:  # imported where used: `specguard check` never loads deploy/
    from specguard.deploy.tree_check import TreeCheck

RULES = RuleSet()


def _composed(paths: Sequence[str | Path], settings: Settings) -> tuple[Pack, RuleSet]:
    """The packs the settings name (by default, those of the framework the paths are) and the rules they feed."""
    chosen = settings.builtin_packs
    builtin = check_builtin_packs(chosen) if chosen is not None else packs_for([Path(p) for p in paths])
    return load_pack(settings.rule_packs, builtin), RuleSet.for_packs(builtin)


def check_paths(
    paths: Sequence[str | Path], settings: Settings | None = None, *, use_cache: bool = True, pack: Pack | None = None
) -> engine.CheckResult:
    """`specguard check PATHS`: every rule the settings enable, with their packs (or `pack`, and every rule)."""
    settings = settings or Settings()
    packs, rules = (pack, RULES) if pack is not None else _composed(paths, settings)
    return engine.check_paths(paths, settings, packs, rules, use_cache=use_cache)


def check_given(path: str, data: bytes, settings: Settings) -> engine.CheckResult:
    """`specguard check - --stdin-filename PATH`: the bytes given as the file `path` of its project."""
    return engine.check_given(path, data, settings, *_composed([path], settings))


def check_source(
    text: str,
    path: str = "example.py",
    module: str = "example",
    *,
    pack: Pack | None = None,
    settings: Settings | None = None,
    line_length: int = DEFAULT_LINE_LENGTH,
) -> list[Finding]:
    """One in-memory module, checked alone (the rules' own examples, the property tests)."""
    settings = settings or Settings()
    pack = pack or load_pack(settings.rule_packs)
    judged = engine.check_source_judged(
        text, path, module, pack=pack, rules=RULES, settings=settings, line_length=line_length
    )
    return judged[0]


def check_source_judged(
    text: str, path: str = "example.py", module: str = "example"
) -> tuple[list[Finding], list[Judgement]]:
    """`check_source` with the default settings, and the sites the rules left undecided."""
    return engine.check_source_judged(
        text, path, module, pack=load_pack(Settings().rule_packs), rules=RULES, settings=Settings()
    )


def check_served_tree(root: Path) -> TreeCheck:
    """`specguard check` over a served vLLM tree, with its own settings (see `served_tree_settings`), as the config
    pre-flight and `specguard doctor` read it."""
    from specguard.deploy.tree_check import CheckedFinding, TreeCheck

    result = check_paths([root], served_tree_settings(root))
    found = result.discovery
    problems = [  # what may hide a finding a hazard needs
        *result.errors,
        *(found.notes if found is not None else []),
        *(f"{f.path}: {f.message}" for f in result.findings if f.code == "SG000"),
    ]
    left = None
    if found is not None and found.stopped is not None:
        left = (found.stopped[0], frozenset(Path(f).resolve() for f in found.files))
    findings = tuple(CheckedFinding(f.code, Path(f.path).resolve(), int(f.line), f.message) for f in result.findings)
    undecided = tuple(CheckedFinding(j.code, Path(path).resolve(), j.span[0], j.why) for path, j in result.undecided)
    return TreeCheck(result.files, findings, tuple(problems), tuple(result.errors), left, undecided)
