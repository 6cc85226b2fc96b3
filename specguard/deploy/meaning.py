"""Finding a validation by what it does, where the served source does not say it with the catalogued text.

A fork may reword a check, move it to another module, or test through a local variable. The catalogue names
each validation by its text, and says which config values make the hazard impossible (`neutral`). Where no
statement has the text, every raise/assert (or warning) in the searched files whose function reads one of those
values is a candidate, and each is evaluated twice: with the config, and with the config made neutral. A candidate
the config certainly reaches and the neutral config does not is the validation, whatever it says; one the config
may reach (an undecided condition) leaves the hazard not judged; no candidate at all leaves it not judged too.
"""

from __future__ import annotations

import ast
import fnmatch
from dataclasses import dataclass
from typing import Any

from specguard.deploy.model import ServingConfig
from specguard.deploy.situation import Reach, SiteRef, innermost, message_nodes, other_platform
from specguard.evaluation.paths import Outcome, Verdict, verdict
from specguard.evaluation.values import UNKNOWN
from specguard.program.tree import SourceTree

UNSET = "unset"


def neutral_twins(cfg: ServingConfig, neutral: dict[str, Any]) -> list[ServingConfig] | None:
    """One twin of the config per neutral key, with that key's neutral value; None when the config already has
    one of them (the hazard arises only when every key differs from its neutral value)."""
    twins: list[ServingConfig] = []
    for key, value in neutral.items():
        twin = _with(cfg, key, None if value == UNSET else value)
        if twin is None:
            return None
        twins.append(twin)
    return twins


def _with(cfg: ServingConfig, key: str, target: Any) -> ServingConfig | None:
    """The config with `key` (dotted: inside a JSON option) set to `target`; None if it already is."""
    data = {k: v for k, v in cfg.model_dump().items() if v is not None}
    head, _, rest = key.partition(".")
    if rest:
        section = data.get(head)
        current = section.get(rest) if isinstance(section, dict) else None
        if current is None or current == target:
            return None
        data[head] = {k: v for k, v in {**section, rest: target}.items() if v is not None}  # type: ignore[dict-item]
    else:
        if data.get(head) == target:
            return None
        data[head] = target
    return ServingConfig.model_validate({k: v for k, v in data.items() if v is not None})


def fields_of(neutral: dict[str, Any]) -> list[str]:
    """The attribute names the neutral keys stand for (`speculative_config.draft_tensor_parallel_size` ->
    `draft_tensor_parallel_size`)."""
    return sorted({key.rpartition(".")[2] for key in neutral})


def candidates(tree: SourceTree, fields: list[str], kind: str, globs: list[str], platform: str | None) -> list[SiteRef]:
    """Raises/asserts (kind "raise") or warning calls in `globs` whose function reads one of `fields`."""
    key = ("meaning", tuple(fields), kind, tuple(globs), platform)
    if key not in tree.memo:
        tree.memo[key] = _candidates(tree, fields, kind, globs, platform)
    return tree.memo[key]


def _candidates(
    tree: SourceTree, fields: list[str], kind: str, globs: list[str], platform: str | None
) -> list[SiteRef]:
    paths = sorted({p for f in fields for p in tree.files_containing(f)})
    out: list[SiteRef] = []
    reads: dict[int, bool] = {}
    for path in paths:
        rel = tree.relpath(path)
        if not any(fnmatch.fnmatch(rel, g) for g in globs):
            continue
        if platform is not None and other_platform(rel, platform):
            continue
        module = tree.module(tree.module_name(path))
        if module is None:
            continue
        for node, message in message_nodes(tree, module, kind):
            found = innermost(module, node, tree)
            if found is None:
                continue
            function, owner = found
            if id(function) not in reads:
                reads[id(function)] = _reads(function, fields)
            if reads[id(function)]:
                out.append(SiteRef(module, function, owner, node, message, rel))
    return out


def _reads(function: ast.AST, fields: list[str]) -> bool:
    wanted = set(fields)
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and node.attr in wanted:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in wanted:
            return True
    return False


@dataclass
class ByMeaning:
    """What evaluating the candidates found: the verdict, and how many were evaluated."""

    verdict: Verdict
    evaluated: int


def judge(reach: Reach, twins: list[Reach], sites: list[SiteRef]) -> ByMeaning:
    """Statements the config reaches and none of its neutral twins does: True (certain), UNKNOWN, or False."""
    mine = _by_site(reach.outcomes(sites))
    theirs = [_by_site(twin.outcomes(sites)) for twin in twins]
    refusing: list[Outcome] = []
    undecided: list[Outcome] = []
    for site in sites:
        if any(verdict(other.get(id(site.node), [])).value is not False for other in theirs):
            continue  # reached (or maybe reached) without the hazard's values too: another check
        v = verdict(mine.get(id(site.node), []))
        if v.value is True:
            refusing += v.outcomes
        elif v.value is UNKNOWN:
            undecided += v.outcomes
    if refusing:
        return ByMeaning(verdict(refusing), len(sites))
    if undecided:
        return ByMeaning(verdict(undecided), len(sites))
    return ByMeaning(Verdict(False, []), len(sites))


def _by_site(outcomes: list[Outcome]) -> dict[int, list[Outcome]]:
    out: dict[int, list[Outcome]] = {}
    for outcome in outcomes:
        out.setdefault(id(outcome.site.node), []).append(outcome)
    return out
