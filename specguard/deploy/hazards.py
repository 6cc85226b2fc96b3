"""Evaluate a serving config against the hazard catalogue and the served vLLM source.

One function per code. Each reads its condition from the served source: `specguard check` findings (CFG101,
CFG104, CFG114), enums and aliases (CFG106, CFG111, CFG112), the metadata builder a backend constructs
(CFG102, CFG103), or the validation statements the config reaches (the evidence hazards), judged by the static
evaluator with the config's values. A condition the source leaves undecided for this config (a GPU property,
the draft model's architecture) makes the hazard "not judged", with the expression that decides it.
Wording lives in the catalogue; these functions supply the facts it formats.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from specguard.deploy import meaning
from specguard.deploy.catalogue import (
    BlockSizeParams,
    BuilderValidationParams,
    Catalogue,
    DataParallelEngine,
    DraftPathParams,
    EnvironmentParams,
    EnvironmentValidation,
    Evidence,
    EvidenceParams,
    GroupMergeParams,
    Hazard,
    InterleaveParams,
    InterleaveResolution,
    OtherDraftPathParams,
    PaddedDraftParams,
    Registry,
    SourceEnumParams,
    SpeculatorParams,
    ValidationParams,
)
from specguard.deploy.derived import ServedMethod, served_method, with_served_method
from specguard.deploy.evaluator import config_evaluator
from specguard.deploy.facts import SourceFacts, SourceFinding
from specguard.deploy.meaning import neutral_twins
from specguard.deploy.model import ServingConfig
from specguard.deploy.situation import Reach, SiteRef, Situation, find_sites, innermost
from specguard.evaluation import environment
from specguard.evaluation.budget import OutOfBudget, run_budget
from specguard.evaluation.paths import Cond, Outcome, Verdict, verdict
from specguard.evaluation.values import UNKNOWN, ClassRef, Obj
from specguard.program.ast_tools import cached_on, walked
from specguard.program.tree import ClassInfo, ParsedModule, SourceLeftUnread, SourceTree


@dataclass(frozen=True)
class ConfigFinding:
    code: str
    severity: str
    message: str
    key: str
    fix: str
    value: str | None = None  # the option's or variable's value in the config judged (None: not one of them)

    def as_dict(self) -> dict[str, str | None]:
        return {
            "code": self.code,
            "severity": self.severity,
            "key": self.key,
            "value": self.value,
            "message": self.message,
            "fix": self.fix,
        }

    @property
    def at_fault(self) -> str:
        """The option or variable with its value, as an operator would write it."""
        return self.key if self.value is None else f"{self.key}={self.value}"


@dataclass
class Judgement:
    findings: list[ConfigFinding] = field(default_factory=list)
    # code -> why it was not judged (no source; or a condition the config does not decide).
    not_judged: dict[str, str] = field(default_factory=dict)
    source: str | None = None
    # What could not be read: parts of the source `specguard check` failed on, hazards whose facts failed.
    notes: list[str] = field(default_factory=list)
    # Variables of the serving environment that were unset where a branch of a verdict read them: name -> the
    # verdicts they decided ("all": the situation every verdict starts from).
    assumed_unset: dict[str, list[str]] = field(default_factory=dict)

    def env_note(self) -> str | None:
        """The unset variables that decided a verdict this judgement reports (a finding, or not judged)."""
        reported = {f.code for f in self.findings} | set(self.not_judged)
        items = [
            (name, shown)
            for name, codes in self.assumed_unset.items()
            if (shown := [c for c in codes if c == "all" or c in reported])
        ]
        if not items:
            return None
        listed = "; ".join(f"{name} ({', '.join(codes)})" for name, codes in items)
        return f"{ENV_NOTE}: {listed}"


class NotJudged(Exception):
    """The source leaves the hazard undecided for this config; the message says on what."""


@dataclass(frozen=True)
class _Hit:
    key: str
    facts: dict[str, Any]
    assumption: str = ""  # what the verdict assumed that the config does not decide (the model runner, ...)


@dataclass
class _Resolved:
    """The KV-cache interleave size vLLM ends up with, and the option that decides it."""

    value: Any
    key: str
    reasons: str = ""


class Context:
    """What the evaluators of one config share: the source, the situation, and facts computed once."""

    def __init__(self, cfg: ServingConfig, facts: SourceFacts, served: ServedMethod | None = None) -> None:
        self.written = cfg  # as the config writes it (what vLLM validates before deriving anything)
        self.served = served or ServedMethod(cfg.method)
        self.cfg = with_served_method(cfg, self.served)  # as the served source derives it: what hazards judge
        self.facts = facts
        self._interleave: dict[tuple[str, str], tuple[Reach, _Resolved]] = {}
        self._builders: dict[tuple[int, str, str, bool], list[Outcome]] = {}
        self._sites: dict[tuple[str, str, tuple[str, ...], str], list[SiteRef]] = {}
        self.code = ""  # the hazard being judged, for its notes
        self.notes: list[str] = []
        self.evidence_texts: list[str] = []  # the raises the catalogue's hazards name (CFG118 leaves them to them)

    def note(self, text: str) -> None:
        self.notes.append(f"{self.code}: {text}")

    @cached_property
    def situation(self) -> Situation:
        return Situation(self.cfg, self.facts)

    @cached_property
    def reach(self) -> Reach:
        return Reach(self.situation)

    def sites(self, evidence: Evidence, platform: str | None = "cuda") -> list[SiteRef]:
        key = (evidence.text, evidence.kind, tuple(evidence.files), platform or "")
        if key not in self._sites:
            self._sites[key] = find_sites(self.facts.tree, evidence.text, evidence.kind, evidence.files, platform)
        return self._sites[key]

    def with_interleave(self, res: InterleaveResolution) -> tuple[Reach, _Resolved]:
        """The situation with the KV-cache interleave size vLLM resolves (`res`) for this config."""
        key = (res.file, res.attribute)
        if key not in self._interleave:
            resolved = _resolve_interleave(self, res)
            self._interleave[key] = (Reach(Situation(self.cfg, self.facts, interleave=resolved.value)), resolved)
        return self._interleave[key]

    def builder_outcomes(self, builder: ClassInfo, role_attribute: str, draft: bool, reach: Reach) -> list[Outcome]:
        """Everything constructing `builder` reaches, for a target layer or (draft=True) a draft layer."""
        key = (id(reach), builder.module, builder.name, draft)
        if key in self._builders:
            return self._builders[key]
        found = self.facts.tree.method(builder, "__init__")
        outcomes: list[Outcome] = []
        if found is not None:
            init, owner = found
            module = self.facts.tree.module(owner.module)
            if module is not None:
                obj = Obj(
                    builder,
                    {role_attribute: draft, "vllm_config": reach.situation.vllm},
                    defaults=True,
                    label=builder.name,
                    pinned=frozenset({role_attribute}),
                )
                _, kwargs = reach.situation.bind(init, owner, module, defaults=True)
                outcomes = reach.run(module, init, owner, obj, kwargs)
        self._builders[key] = outcomes
        return outcomes


HazardCheck = Callable[[Context, Any], list[_Hit]]


def _where(findings: list[SourceFinding], limit: int = 3) -> str:
    shown = "; ".join(f.where() for f in findings[:limit])
    return shown + (f"; and {len(findings) - limit} more" if len(findings) > limit else "")


def _site_where(outcomes: list[Outcome], ctx: Context) -> tuple[str, str]:
    """The text and location of the statement reached (the first in the source, if several are)."""
    first = sorted(outcomes, key=lambda o: (ctx.facts.tree.relpath(o.site.module.path), o.site.line))[0]
    return " ".join(first.site.message.split()), f"{ctx.facts.tree.relpath(first.site.module.path)}:{first.site.line}"


def _undecided(v: Verdict, what: str) -> NotJudged:
    return NotJudged(f"{what} depends on {v.reasons()}, which the serving config does not decide")


def _judge_sites(ctx: Context, p: EvidenceParams, reach: Reach | None = None) -> Verdict:
    """Whether the config reaches one of the statements `p.evidence` names (found by its text, or else by what it
    does: see `meaning`). A config with one of the hazard's neutral values has not the hazard."""
    reach = reach or ctx.reach
    twins = neutral_twins(ctx.cfg, p.neutral)
    if twins is None:
        return verdict([])
    by_text = {e.text: ctx.sites(e, p.platform) for e in p.evidence}
    sites = [s for found in by_text.values() for s in found]
    v = reach.verdict(sites) if sites else verdict([])
    absent = [e for e in p.evidence if not by_text[e.text]]
    if not absent or v.value is True:
        return v
    # A statement of the catalogue is not in the source (reworded, moved, gone): what it checked is judged by meaning.
    return _judge_by_meaning(ctx, p, reach, twins, absent, {id(s.node) for s in sites})


def _judge_by_meaning(
    ctx: Context,
    p: EvidenceParams,
    reach: Reach,
    twins: list[ServingConfig],
    absent: list[Evidence],
    known: set[int],
) -> Verdict:
    kind = p.evidence[0].kind
    fields = meaning.fields_of(p.neutral)
    texts = " or ".join(f'"{e.text}"' for e in absent)
    missing = f"no statement saying {texts} is in the served source"
    found = [
        s for s in meaning.candidates(ctx.facts.tree, fields, kind, p.search, p.platform) if id(s.node) not in known
    ]
    scope = f"in {', '.join(p.search)} reading {', '.join(fields)}"
    what, whats = ("warning", "warnings") if kind == "warning" else ("raise or assert", "raises and asserts")
    if not found:
        raise NotJudged(f"{missing}, and no {what} {scope} was found{_unreadable(ctx.facts.tree)}")
    others = [Reach(Situation(twin, ctx.facts, interleave=reach.situation.interleave)) for twin in twins]
    judged = meaning.judge(reach, others, found)
    v = judged.verdict
    if v.value is True:
        _, where = _site_where(v.outcomes, ctx)
        ctx.note(f"{missing}; judged by meaning: the statement at {where} is reached with this config, not without it")
    elif v.value is False:  # the validation may have moved out of reach, or be gone: never a clean by default
        raise NotJudged(
            f"{missing}, and none of the {judged.evaluated} {whats} {scope} refuses this config as evaluated"
            f"{_unreadable(ctx.facts.tree)}"
        )
    else:
        raise NotJudged(f"{missing}; judged by meaning, it depends on {v.reasons()}{_unreadable(ctx.facts.tree)}")
    return v


def _unreadable(tree: SourceTree) -> str:
    return f" ({unreadable_files(tree)})" if tree.unreadable else ""


def unreadable_files(tree: SourceTree, limit: int = 3) -> str:
    """ "2 files of the served source could not be read: a.py (a FIFO...); b.py (...)"."""
    items = list(tree.unreadable.items())
    shown = "; ".join(f"{rel} ({why})" for rel, why in items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    files = "1 file" if len(items) == 1 else f"{len(items)} files"
    return f"{files} of the served source could not be read: {shown}{more}"


def _evidence_hit(
    ctx: Context, p: EvidenceParams, key: str, facts: dict[str, Any], reach: Reach | None = None
) -> list[_Hit]:
    v = _judge_sites(ctx, p, reach)
    if v.value is UNKNOWN:
        raise _undecided(v, "whether vLLM's validation refuses it")
    if v.value is not True:
        return []
    raised, where = _site_where(v.outcomes, ctx)
    return [_Hit(key, {**facts, "raised": raised, "where": where})]


# -- analyzer-finding hazards -------------------------------------------------------------------------------------


def _function(tree: SourceTree, file: str, name: str) -> tuple[ParsedModule, Any, ClassInfo | None] | None:
    """A function of `file` named `name` or `Class.method` (inherited methods included)."""
    module = tree.module_for_path(file)
    if module is None:
        return None
    owner_name, _, function_name = name.rpartition(".")
    if not owner_name:
        function = module.functions.get(name)
        return (module, function, None) if function is not None else None
    owner = module.classes.get(owner_name)
    found = tree.method(owner, function_name) if owner is not None else None
    if found is None:
        return None
    defining = tree.module(found[1].module)
    return (defining, found[0], found[1]) if defining is not None else None


def _speculators(ctx: Context, registry: Registry) -> list[ClassInfo]:
    """The speculator classes a runner's registry builds for the config's method (any it may build, whatever
    else decides among them: the draft model's architecture), by evaluating the registry function."""
    found = _function(ctx.facts.tree, registry.file, registry.function)
    what = f"which speculator {registry.runner} runs for method '{ctx.cfg.method}' is read from"
    if found is None:
        raise NotJudged(
            f"{what} `{registry.function}` in {registry.file}, and the served source has none"
            f"{_unreadable(ctx.facts.tree)}"
        )
    module, function, owner = found
    if registry.attribute is not None and not _stores(function, registry.attribute):
        raise NotJudged(
            f"{what} what `{registry.function}` in {registry.file} stores in `{registry.attribute}`, and the served "
            "source stores nothing there"
        )
    outcomes = ctx.reach.constructed(module, function, owner, registry.attribute)
    live = [o for o in outcomes if o.site.kind == "construct" and verdict([o]).value is not False]
    if not live and not verdict([o for o in outcomes if o.site.kind != "construct"]).certain:
        # Neither a class of the source nor a refusal of the method: what it builds is lost to the evaluation.
        raise NotJudged(f"{what} `{registry.function}` in {registry.file}, which builds none of the source's classes")
    return list(dict.fromkeys(o.detail for o in live))


def _stores(function: ast.AST, attribute: str) -> bool:
    """Whether `function` assigns `<something>.<attribute>` anywhere in it."""
    return any(
        isinstance(node, ast.Attribute) and node.attr == attribute and isinstance(node.ctx, ast.Store)
        for node in ast.walk(function)
    )


@dataclass
class _Pick:
    """A model runner the served source's selection may pick for the config, and what that rests on."""

    registry: Registry
    certain: bool
    conditions: list[str]  # the undecided tests (and returned values) it depends on, `text` (file:line)

    def depending(self) -> str:
        if self.certain or not self.conditions:
            return ""
        more = f"; and {len(self.conditions) - 3} more" if len(self.conditions) > 3 else ""
        return " depending on " + "; ".join(self.conditions[:3]) + more


def _picks(ctx: Context, p: SpeculatorParams) -> tuple[list[_Pick], list[str], str]:
    """The runners the selection may pick for the config, the variables (unset) that decided a branch of it, and
    the selection as the verdicts name it."""
    sel, tree = p.selection, ctx.facts.tree
    where = f"`{sel.function}` ({sel.file})"
    found = _function(tree, sel.file, sel.function)
    if found is None:
        raise NotJudged(f"which model runner serves it is read from {where}, which the served source lacks")
    reach = ctx.reach  # built before: what building the situation decides is no part of the selection
    env = environment.current()
    start = len(env.decided)
    returns = [o for o in reach.returned(*found) if verdict([o]).value is not False]
    picks = []
    for registry in p.registries:
        mine = [o for o in returns if o.detail is UNKNOWN or _truth(o.detail) is registry.selected_by]
        if not mine:
            continue
        conds: list[Cond] = []
        for o in mine:
            conds += [cond for cond, _ in o.path]
            node, module = o.site.node, o.site.module
            if o.detail is UNKNOWN and isinstance(node, ast.Return) and node.value is not None:
                conds.append(Cond(node.value, module.path, tree.relpath(module.path)))  # what it returns decides
        ordered = sorted(dict.fromkeys(conds), key=lambda c: (c.relpath, getattr(c.node, "lineno", 0)))
        certain = any(not o.path and o.detail is not UNKNOWN for o in mine)
        picks.append(_Pick(registry, certain, list(dict.fromkeys(c.describe() for c in ordered))))
    return picks, env.decided_unset(start), where


def _truth(value: Any) -> bool | None:
    try:
        return bool(value)
    except Exception:  # noqa: BLE001 - an evaluated value without a plain truth value
        return None


def _by_runner(ctx: Context, p: SpeculatorParams, judge: Callable[[Registry], list[_Hit]]) -> list[_Hit]:
    """The hazard judged for the model runner the served source picks for the config. Runners that all agree need
    no pick. Where they disagree and the pick is undecided, or rests on a variable the serving environment leaves
    unset, the verdict says which runner it was judged for and what picks it: in a hit's message, or in a note
    for a clean verdict."""
    verdicts: dict[int, list[_Hit] | NotJudged] = {}
    for registry in p.registries:
        try:
            verdicts[id(registry)] = judge(registry)
        except NotJudged as exc:
            verdicts[id(registry)] = exc
    judged = [v for v in verdicts.values() if not isinstance(v, NotJudged)]
    if len(judged) == len(verdicts) and len({bool(v) for v in judged}) == 1:
        return judged[0]  # which runner serves it does not matter
    present = [r for r in p.registries if ctx.facts.tree.module_for_path(r.file) is not None]
    if len(present) == 1 and _function(ctx.facts.tree, p.selection.file, p.selection.function) is None:
        only = verdicts[id(present[0])]  # a source with one model runner and no selection (0.34.0): it serves
        if isinstance(only, NotJudged):
            raise only
        return only
    picks, unset, where = _picks(ctx, p)
    if not picks:
        raise NotJudged(f"{where} picks none of {', '.join(r.runner for r in p.registries)} for this config")
    results: list[tuple[_Pick, list[_Hit]]] = []
    for pick in picks:
        result = verdicts[id(pick.registry)]
        if isinstance(result, NotJudged):
            raise result
        results.append((pick, result))
    hit = [(pick, hits) for pick, hits in results if hits]
    clean = [pick for pick, hits in results if not hits]
    if hit and clean:  # the pick is undecided, and decides the verdict
        otherwise = " or ".join(f"{pick.registry.runner}, picked otherwise," for pick in clean)
        return _assumed(hit[0], where, unset, f"{otherwise} has not this hazard")
    if not unset:  # a variable set, or none read: the pick is the deployment's
        return hit[0][1] if hit else []
    # The pick rests on a variable left unset; a runner it does not pick has another verdict, or none.
    others = "; ".join(
        f"{r.runner} {_other_verdict(verdicts[id(r)])}" for r in p.registries if all(r is not q.registry for q in picks)
    )
    if hit:
        return _assumed(hit[0], where, unset, others)
    picked = " or ".join(f"{pick.registry.runner}{_picked_by(pick, where, unset)}" for pick in clean)
    ctx.note(f"no hazard for {picked}; {others}")
    return []


def _other_verdict(result: list[_Hit] | NotJudged) -> str:
    if isinstance(result, NotJudged):
        return f"could not be judged ({result})"
    return "would have it" if result else "has not this hazard"


def _picked_by(pick: _Pick, where: str, unset: list[str]) -> str:
    variables = f" with {', '.join(unset)} unset" if unset else ""
    return f", which {where} picks for this config{variables}{pick.depending()}"


def _assumed(hit: tuple[_Pick, list[_Hit]], where: str, unset: list[str], others: str) -> list[_Hit]:
    pick, hits = hit
    said = f"Judged for {pick.registry.runner}{_picked_by(pick, where, unset)}; {others}."
    return [_Hit(h.key, h.facts, said) for h in hits]


def _method(ctx: Context) -> str | None:
    """The speculative method the served source arrives at (None: no speculative config). Where that depends on
    what vLLM reads from the draft model at startup, the method written (a note says so), or not judged."""
    if ctx.served.undecided and ctx.cfg.method is None:
        raise NotJudged(ctx.served.undecided)
    return ctx.cfg.method


def _cfg101(ctx: Context, p: DraftPathParams) -> list[_Hit]:
    def on_the_path(registry: Registry, cls: ClassInfo) -> bool:
        assert registry.draft_path_class is not None  # the catalogue's validation
        return ctx.facts.descends_from(cls, registry.draft_path_class)

    return _padded_draft(ctx, p, on_the_path)


def _cfg117(ctx: Context, p: OtherDraftPathParams) -> list[_Hit]:
    def elsewhere(registry: Registry, cls: ClassInfo) -> bool:
        return not any(ctx.facts.descends_from(cls, name) for name in p.judged_elsewhere)

    return _padded_draft(ctx, p, elsewhere)


def _padded_draft(ctx: Context, p: PaddedDraftParams, judged: Callable[[Registry, ClassInfo], bool]) -> list[_Hit]:
    """With DP ranks sharing batches, the speculators of the config's method that `judged` keeps, where a padded
    count reaches their draft metadata build outside FULL graphs (`p.rules` findings in their lineage)."""
    hits = _padded_draft_paths(ctx, p, judged)
    if not hits or p.data_parallel is None:
        return hits
    shared, why = _ranks_share_batches(ctx, p.data_parallel)
    if shared is False:
        ctx.note(f"no hazard for data-parallel-size={ctx.cfg.data_parallel_size}: {why}")
        return []
    if shared is True:
        return hits
    return [_Hit(h.key, h.facts, f"{h.assumption} {why}".strip()) for h in hits]


def _ranks_share_batches(ctx: Context, engine: DataParallelEngine) -> tuple[Any, str]:
    """Whether the engine core the served source runs each DP rank with shares batches across the ranks (so DP
    padding reaches the draft) for this config: True, False, or UNKNOWN; and what the verdict says of it."""
    where = f"`{engine.function}` ({engine.file})"
    found = _function(ctx.facts.tree, engine.file, engine.function)
    if found is None:
        return UNKNOWN, f"Judged for DP ranks sharing batches: {where}, which picks the engine, is not in the source."
    module, function, owner = found
    try:
        built = ctx.reach.constructed(
            module, function, owner, engine.stored_in, given={engine.config_argument: ctx.situation.vllm}
        )
    except OutOfBudget as exc:
        return UNKNOWN, f"Judged for DP ranks sharing batches: evaluating {where} ran out ({exc})."
    built = [o for o in built if o.site.kind == "construct"]
    shared = [o for o in built if ctx.facts.descends_from(o.detail, engine.coordinated_class)]
    alone = sorted({o.detail.name for o in built if o not in shared})
    if not built:
        return UNKNOWN, f"Judged for DP ranks sharing batches: {where} builds no engine core the evaluation follows."
    found_shared = verdict(shared)
    if found_shared.value is False:
        return False, f"{where} runs each DP rank as its own engine ({', '.join(alone)}) with DP 1: no DP padding"
    if found_shared.certain:
        return True, ""
    others = (
        f"; {' or '.join(alone)}, built otherwise, runs each DP rank alone and has not this hazard" if alone else ""
    )
    return UNKNOWN, (
        f"Judged for DP ranks sharing batches ({engine.coordinated_class}), which {where} builds depending on "
        f"{found_shared.reasons()}{others}."
    )


def _padded_draft_paths(
    ctx: Context, p: PaddedDraftParams, judged: Callable[[Registry, ClassInfo], bool]
) -> list[_Hit]:
    """The hits of `_padded_draft`, whoever runs the DP ranks."""
    cfg, facts = ctx.cfg, ctx.facts
    if cfg.data_parallel_size <= 1 or _method(ctx) is None:
        return []

    def judge(registry: Registry) -> list[_Hit]:
        family = [c for c in _speculators(ctx, registry) if judged(registry, c)]
        hits = facts.findings_in_lineage(family, p.rules) if family else []
        if not hits:
            _undecided_sites(facts, family, p.rules)
            return []
        return [
            _Hit(
                "data-parallel-size",
                {
                    "method": cfg.method,
                    "dp": cfg.data_parallel_size,
                    "speculators": ", ".join(c.name for c in family),
                    "findings": _where(hits),
                },
            )
        ]

    return _by_runner(ctx, p, judge)


def _undecided_sites(facts: SourceFacts, classes: list[ClassInfo], rules: list[str]) -> None:
    """No finding on the draft path is a clean verdict only where `specguard check` decided every site there."""
    left = facts.undecided_in_lineage(classes, rules) if classes else []
    if left:
        shown = "; ".join(f"{s.where()}: {s.why}" for s in left[:2])
        more = f" (and {len(left) - 2} more)" if len(left) > 2 else ""
        raise NotJudged(f"`specguard check` could not decide the draft path's sites: {shown}{more}")


def _cfg114(ctx: Context, p: SpeculatorParams) -> list[_Hit]:
    cfg, facts = ctx.cfg, ctx.facts
    if cfg.decode_context_parallel_size <= 1 or _method(ctx) is None:
        return []

    def judge(registry: Registry) -> list[_Hit]:
        classes = _speculators(ctx, registry)
        hits = facts.findings_in_lineage(classes, p.rules)
        if not hits:
            _undecided_sites(facts, classes, p.rules)
            return []
        return [
            _Hit(
                "decode-context-parallel-size",
                {
                    "method": cfg.method,
                    "dcp": cfg.decode_context_parallel_size,
                    "speculators": ", ".join(c.name for c in classes),
                    "findings": _where(hits),
                },
            )
        ]

    return _by_runner(ctx, p, judge)


def _cfg104(ctx: Context, p: GroupMergeParams) -> list[_Hit]:
    if _method(ctx) not in p.methods:
        return []
    hits = ctx.facts.findings_of(p.rules)
    if not hits:
        return []
    return [_Hit("speculative-config.method", {"method": ctx.cfg.method, "findings": _where(hits)})]


# -- metadata builders --------------------------------------------------------------------------------------------


def _interleave_key(resolved: _Resolved, cfg: ServingConfig) -> str:
    return resolved.key


def _cfg102(ctx: Context, p: InterleaveParams) -> list[_Hit]:
    cfg = ctx.cfg
    if cfg.attention_backend is None:
        return []  # chosen at startup from the GPU: CFG102 is judged for the backend the config sets
    backend = ctx.facts.backend(p.registry_file, cfg.attention_backend)
    if backend is None and ctx.facts.tree.module_for_path(p.registry_file) is None:
        raise NotJudged(f"the attention backends are read from {p.registry_file}, which the served source lacks")
    if backend is None:
        return []  # not a backend of this source: CFG112 says so
    if backend.builder is None:
        raise NotJudged(f"no metadata builder found for {cfg.attention_backend} (its get_builder_cls())")
    reach, resolved = ctx.with_interleave(p.resolution)
    outcomes = [
        o
        for o in ctx.builder_outcomes(backend.builder, "non_causal_multi_token_decode", False, reach)
        if o.site.kind in ("raise", "assert") and _guarded_by(o, p.interleave_attribute_suffix, ctx.facts.tree)
    ]
    v = verdict(outcomes)
    if v.value is UNKNOWN or (resolved.value is UNKNOWN and outcomes):
        reasons = resolved.reasons if resolved.value is UNKNOWN else v.reasons()
        raise NotJudged(f"whether {backend.builder.name} accepts the KV-cache interleave size depends on {reasons}")
    if v.value is not True:
        return []
    raised, where = _site_where(v.outcomes, ctx)
    required = _required_value(v.outcomes[0], p.interleave_attribute_suffix, ctx.facts.tree)
    return [
        _Hit(
            resolved.key,
            {
                "dcp": cfg.decode_context_parallel_size,
                "backend": cfg.attention_backend,
                "builder": backend.builder.name,
                "raised": raised,
                "where": where,
                "required": required if required is not None else "what the builder accepts",
                "interleave": resolved.value,
                "interleave_key": resolved.key,
            },
        )
    ]


def _guarded_by(outcome: Outcome, suffix: str, tree: SourceTree) -> bool:
    """The statement sits under an `if` (or is an assert) whose test reads a `*<suffix>` value."""
    test = _enclosing_test(outcome, tree)
    return test is not None and any(
        (isinstance(n, ast.Name) and n.id.endswith(suffix))
        or (isinstance(n, ast.Attribute) and n.attr.endswith(suffix))
        for n in ast.walk(test)
    )


def _enclosing_test(outcome: Outcome, tree: SourceTree) -> ast.expr | None:
    """The test of the nearest `if` whose body holds the statement (an assert's own test)."""
    node: ast.AST | None = outcome.site.node
    if isinstance(node, ast.Assert):
        return node.test
    parents = tree.parents(outcome.site.module)
    while node is not None:
        parent = parents.get(id(node))
        if isinstance(parent, ast.If) and any(b is node for b in parent.body):
            return parent.test
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        node = parent
    return None


def _required_value(outcome: Outcome, suffix: str, tree: SourceTree) -> int | None:
    test = _enclosing_test(outcome, tree)
    for comp in (n for n in ast.walk(test) if isinstance(n, ast.Compare)) if test is not None else ():
        sides = [comp.left, *comp.comparators]
        named = any(isinstance(s, (ast.Name, ast.Attribute)) and ast.unparse(s).endswith(suffix) for s in sides)
        for side in sides:
            if named and isinstance(side, ast.Constant) and isinstance(side.value, int):
                return side.value
    return None


def _cfg103(ctx: Context, p: BuilderValidationParams) -> list[_Hit]:
    cfg = ctx.cfg
    sites = ctx.sites(p.evidence, None)
    if cfg.speculative_config is None or cfg.decode_context_parallel_size <= 1:
        return []
    if not sites:
        return _cfg103_by_meaning(ctx, p)
    reach, resolved = ctx.with_interleave(p.resolution)
    site_ids = {id(s.node) for s in sites}
    roles = (
        ("target", cfg.attention_backend, "attention-backend"),
        ("draft", cfg.draft_backend, "speculative-config.attention_backend"),
    )
    undecided: list[str] = []
    for role, backend_name, key in roles:
        draft = role == "draft"
        if backend_name is None:
            outcomes = _validation_without_builder(ctx, sites, p.role_attribute, draft)
            v = verdict([o for o in outcomes if id(o.site.node) in site_ids])
            if v.value is not False:
                undecided.append(f"the {role}'s attention backend, chosen at startup (set {key} to judge it)")
            continue
        backend = ctx.facts.backend(p.registry_file, backend_name)
        if backend is None or backend.builder is None:
            continue
        outcomes = ctx.builder_outcomes(backend.builder, p.role_attribute, draft, reach)
        v = verdict([o for o in outcomes if id(o.site.node) in site_ids])
        if v.value is True:
            raised, where = _site_where(v.outcomes, ctx)
            return [
                _Hit(
                    key if role == "draft" else "decode-context-parallel-size",
                    {
                        "method": cfg.method,
                        "dcp": cfg.decode_context_parallel_size,
                        "role": role,
                        "backend": backend_name,
                        "builder": backend.builder.name,
                        "raised": raised,
                        "where": where,
                    },
                )
            ]
        if v.value is UNKNOWN:
            reasons = resolved.reasons if resolved.value is UNKNOWN else v.reasons()
            undecided.append(f"{reasons} for the {role}'s {backend.builder.name}")
    if undecided:
        raise NotJudged("whether the metadata builders refuse it depends on " + "; ".join(undecided))
    return []


def _cfg103_by_meaning(ctx: Context, p: BuilderValidationParams) -> list[_Hit]:
    """No statement with the catalogued text: a raise constructing the target's or the draft's builder reaches
    with this config and not with DCP off is the validation (one under an interleave-size test is CFG102's)."""
    cfg = ctx.cfg
    reach, _ = ctx.with_interleave(p.resolution)
    twin = Reach(
        Situation(cfg.model_copy(update={"decode_context_parallel_size": 1}), ctx.facts, reach.situation.interleave)
    )
    missing = f'no statement saying "{p.evidence.text}" is in the served source'
    roles = (
        ("target", cfg.attention_backend, "decode-context-parallel-size"),
        ("draft", cfg.draft_backend, "speculative-config.attention_backend"),
    )
    undecided: list[str] = []
    for role, name, key in roles:
        backend = ctx.facts.backend(p.registry_file, name) if name is not None else None
        if backend is None or backend.builder is None:
            undecided.append(
                f"the {role}'s attention backend ({name or 'chosen at startup'}) has no builder to evaluate"
            )
            continue
        draft = role == "draft"

        builder = backend.builder
        theirs = {id(o.site.node) for o in _refusals(ctx, builder, p, draft, twin) if verdict([o]).value is not False}
        mine = [o for o in _refusals(ctx, builder, p, draft, reach) if id(o.site.node) not in theirs]
        v = verdict(mine)
        if v.value is True:
            raised, where = _site_where(v.outcomes, ctx)
            ctx.note(f"{missing}; judged by meaning: constructing {builder.name} raises at {where} with DCP only")
            facts = {"method": cfg.method, "dcp": cfg.decode_context_parallel_size, "role": role, "backend": name}
            return [_Hit(key, {**facts, "builder": backend.builder.name, "raised": raised, "where": where})]
        if v.value is UNKNOWN:
            undecided.append(f"{v.reasons()} for the {role}'s {backend.builder.name}")
    if undecided:
        raise NotJudged(f"{missing}; judged by meaning, it depends on " + "; ".join(undecided))
    raise NotJudged(f"{missing}, and neither metadata builder raises with DCP where it does not without")


def _refusals(ctx: Context, builder: ClassInfo, p: BuilderValidationParams, draft: bool, reach: Reach) -> list[Outcome]:
    """Raises and failed asserts constructing `builder`, other than CFG102's (under an interleave-size test)."""
    outcomes = ctx.builder_outcomes(builder, p.role_attribute, draft, reach)
    return [
        o
        for o in outcomes
        if o.site.kind in ("raise", "assert") and not _guarded_by(o, "interleave_size", ctx.facts.tree)
    ]


def _validation_without_builder(ctx: Context, sites: list[SiteRef], role_attribute: str, draft: bool) -> list[Outcome]:
    """The validation run on a builder of unknown class: what it decides from the config alone."""
    outcomes: list[Outcome] = []
    for site in sites:
        obj = Obj(None, {role_attribute: draft, "vllm_config": ctx.situation.vllm}, label="builder")
        _, kwargs = ctx.situation.bind(site.function, site.owner, site.module)
        outcomes += ctx.reach.run(site.module, site.function, site.owner, obj, kwargs)
    return outcomes


# -- vLLM's own validation ----------------------------------------------------------------------------------------


def _assignments_to(module: ast.Module, attribute: str) -> tuple[ast.Assign, ...]:
    """The statements of `module` assigning `<...parallel_config...>.attribute`, kept on the module: each config
    judged asks again."""

    def find(tree: ast.AST) -> tuple[ast.Assign, ...]:
        return tuple(
            node
            for node in walked(tree)
            if isinstance(node, ast.Assign)
            and any(
                isinstance(t, ast.Attribute) and t.attr == attribute and "parallel_config" in ast.unparse(t)
                for t in node.targets
            )
        )

    return cached_on(module, f"assignments_to_{attribute}", find)  # type: ignore[no-any-return]


def _resolve_interleave(ctx: Context, res: InterleaveResolution) -> _Resolved:
    given_key = "cp-kv-cache-interleave-size"
    base = ctx.situation.value_of(ctx.situation.vllm.fields["parallel_config"], res.attribute)
    parsed = ctx.facts.tree.module_for_path(res.file)
    if parsed is None:
        return _Resolved(base, given_key)
    sites = []
    from specguard.deploy.situation import innermost

    for node in _assignments_to(parsed.tree, res.attribute):
        found = innermost(parsed, node, ctx.facts.tree)
        if found is not None:
            sites.append(SiteRef(parsed, found[0], found[1], node, ast.unparse(node.value), res.file))
    outcomes = ctx.reach.outcomes(sites, watch_attrs={res.attribute})
    assigned = [o for o in outcomes if o.site.kind == "assign"]
    v = verdict(assigned)
    if v.value is UNKNOWN:
        return _Resolved(UNKNOWN, given_key, f"{v.reasons()} (where vLLM resolves the interleave size)")
    if v.value is not True:
        return _Resolved(base, given_key)
    values = [o.detail[1] for o in v.outcomes if not o.path]
    value = values[-1] if values and all(x == values[0] for x in values) else UNKNOWN
    source = " ".join(v.outcomes[-1].site.message.split())
    key = "dcp-kv-cache-interleave-size" if "dcp_kv_cache_interleave_size" in source else given_key
    return _Resolved(value, key, "" if value is not UNKNOWN else "assigned several values")


def _cfg105(ctx: Context, p: EvidenceParams) -> list[_Hit]:
    cfg = ctx.cfg
    v = _judge_sites(ctx, p)
    if v.value is UNKNOWN:
        raise _undecided(v, "whether vLLM's parallel-layout validation refuses it")
    if v.value is not True:
        return []
    raised, where = _site_where(v.outcomes, ctx)
    accepted = _accepted_dcp(ctx, p, _refusing(ctx, v))
    return [
        _Hit(
            "decode-context-parallel-size",
            {
                "tp": cfg.tensor_parallel_size,
                "pcp": cfg.prefill_context_parallel_size,
                "dcp": cfg.decode_context_parallel_size,
                "raised": raised,
                "where": where,
                "accepted": ", ".join(str(d) for d in accepted) or "none found",
            },
        )
    ]


def _refusing(ctx: Context, v: Verdict) -> list[SiteRef]:
    """The statements that refuse the config, as sites to judge other values against."""
    tree = ctx.facts.tree
    out: list[SiteRef] = []
    for o in v.outcomes:
        found = innermost(o.site.module, o.site.node, tree)
        if found is not None and all(s.node is not o.site.node for s in out):
            out.append(
                SiteRef(
                    o.site.module, found[0], found[1], o.site.node, o.site.message, tree.relpath(o.site.module.path)
                )
            )
    return out


def _accepted_dcp(ctx: Context, p: EvidenceParams, refusing: list[SiteRef]) -> list[int]:
    """The DCP sizes the statements that refuse this config accept with its TP and PCP (evaluated, not computed):
    the validation the catalogue names, or the statements judged by meaning to refuse it."""
    cfg = ctx.cfg
    limit = min(cfg.tensor_parallel_size * cfg.prefill_context_parallel_size, 64)
    configs = [cfg.model_copy(update={"decode_context_parallel_size": dcp}) for dcp in range(1, limit + 1)]
    judged = (lambda other: other.reach.verdict(refusing)) if refusing else (lambda other: _judge_sites(other, p))
    return [c.decode_context_parallel_size for c in _accepted_configs(ctx, configs, judged)]


def _accepted_configs(
    ctx: Context, configs: list[ServingConfig], verdict_of: Callable[[Context], Verdict]
) -> list[ServingConfig]:
    """The candidate configs the statements that refuse this one accept (`verdict_of` a candidate's context: False
    where they refuse it not); one whose verdict is undecided is not offered."""
    out = []
    for candidate in configs:
        try:
            if verdict_of(Context(candidate, ctx.facts)).value is False:
                out.append(candidate)
        except NotJudged:
            continue
    return out


def _cfg107(ctx: Context, p: EvidenceParams) -> list[_Hit]:
    spec = ctx.cfg.speculative_config
    if spec is None:
        return []
    facts = {"draft_tp": spec.draft_tensor_parallel_size, "tp": ctx.cfg.tensor_parallel_size, "method": ctx.cfg.method}
    hits = _evidence_hit(ctx, p, "speculative-config.draft_tensor_parallel_size", facts)
    if hits:  # the sizes the same check accepts, up to twice the target's
        sizes = range(1, min(2 * ctx.cfg.tensor_parallel_size, 64) + 1)
        drafts = [spec.model_copy(update={"draft_tensor_parallel_size": n}) for n in sizes]
        configs = [ctx.cfg.model_copy(update={"speculative_config": d}) for d in drafts]
        found = _accepted_configs(ctx, configs, lambda other: _judge_sites(other, p))
        accepted = [c.speculative_config.draft_tensor_parallel_size for c in found if c.speculative_config]
        hits[0].facts["accepted"] = " or ".join(str(n) for n in accepted) or "none found"
    return hits


def _cfg108(ctx: Context, p: EvidenceParams) -> list[_Hit]:
    spec = ctx.cfg.speculative_config
    if spec is None:
        return []
    return _evidence_hit(ctx, p, "speculative-config.tensor_parallel_size", {"value": spec.tensor_parallel_size})


def _cfg109(ctx: Context, p: EvidenceParams) -> list[_Hit]:
    spec = ctx.cfg.speculative_config
    if spec is None:
        return []
    k = spec.num_speculative_tokens if spec.num_speculative_tokens is not None else "(the draft model's n_predict)"
    return _evidence_hit(
        ctx, p, "speculative-config.num_speculative_tokens_per_batch_size", {"dp": ctx.cfg.data_parallel_size, "k": k}
    )


def _cfg110(ctx: Context, p: BlockSizeParams) -> list[_Hit]:
    cfg = ctx.cfg
    reach, resolved = ctx.with_interleave(p.resolution)
    v = _judge_sites(ctx, p, reach)
    if v.value is UNKNOWN:
        if cfg.block_size is None:
            raise NotJudged("vLLM picks the KV-cache block size at startup (set block-size to judge it)")
        reasons = v.reasons() + (f"; {resolved.reasons}" if resolved.reasons else "")
        raise NotJudged(f"whether vLLM's block-size check refuses it depends on {reasons}")
    if v.value is not True:
        return []
    raised, where = _site_where(v.outcomes, ctx)
    key, accepted = _accepted_interleave(ctx, p, resolved.key)
    return [
        _Hit(
            "block-size",
            {
                "block_size": cfg.block_size,
                "dcp": cfg.decode_context_parallel_size,
                "interleave": resolved.value,
                "interleave_key": resolved.key,
                "raised": raised,
                "where": where,
                "accepted": ", ".join(str(x) for x in accepted) or "none found",
                "accepted_key": key,
            },
        )
    ]


def _accepted_interleave(ctx: Context, p: BlockSizeParams, resolved: str) -> tuple[str, list[int]]:
    """The interleave sizes (powers of two up to the block size) the same check accepts, this config's block size
    and DCP kept (evaluated, not computed), for the option vLLM resolves the size from, or else for another
    interleave option the config sets (the deprecated DCP one, which vLLM copies over it on some releases)."""
    given = [k for k in ServingConfig.model_fields if k.endswith("kv_cache_interleave_size") and getattr(ctx.cfg, k)]
    for option in dict.fromkeys([resolved.replace("-", "_"), *given]):
        if option not in ServingConfig.model_fields or not ctx.cfg.block_size:
            continue
        sizes = [2**n for n in range(11) if 2**n <= ctx.cfg.block_size]
        configs = [ctx.cfg.model_copy(update={option: size}) for size in sizes]
        found = _accepted_configs(
            ctx, configs, lambda other: _judge_sites(other, p, other.with_interleave(p.resolution)[0])
        )
        if found:
            return option.replace("_", "-"), [getattr(c, option) for c in found]
    return resolved, []


def _cfg113(ctx: Context, p: EvidenceParams) -> list[_Hit]:
    cfg = ctx.cfg
    facts = {"pcp": cfg.prefill_context_parallel_size, "dp": cfg.data_parallel_size}
    return _evidence_hit(ctx, p, "prefill-context-parallel-size", facts)


def _cfg115(ctx: Context, p: EvidenceParams) -> list[_Hit]:
    mode = ctx.cfg.cudagraph_mode
    if not ctx.cfg.enforce_eager or mode is None or mode == "NONE":
        return []  # nothing of the user's to override: the hazard is an explicit mode that vLLM drops
    return _evidence_hit(ctx, p, "enforce-eager", {"mode": mode})


def _cfg116(ctx: Context, p: EnvironmentParams) -> list[_Hit]:
    """Each variable of the serving environment that the served source declares, parsed by the served code that
    parses it when read: a value that code refuses (`bool(int("false"))`) stops vLLM where it first reads it."""
    tree = ctx.facts.tree
    module = tree.module(f"{tree.package}.{p.module}")
    if module is None:
        raise NotJudged(f"how vLLM parses its environment is read from {p.module}.py, which the served source lacks")
    hits: list[_Hit] = []
    ev = config_evaluator(tree)
    text = tree.text(module.path)
    for name, value in sorted(environment.current().values.items()):
        # Declared for type checkers, or named in a string (a key of the table the module's `__getattr__` reads):
        # another name is not one this source parses.
        if name not in module.typing_only and f'"{name}"' not in text and f"'{name}'" not in text:
            continue
        mark = len(ev.outcomes)
        ev.module_value(module, name)
        # Every way through raises (both branches of a test on what the evaluation cannot know, as well); an
        # AttributeError is the module saying it declares no such variable.
        raised = [
            o for o in ev.outcomes[mark:] if o.site.kind == "raise" and _raised_name(o.site.node) != "AttributeError"
        ]
        refused = verdict(raised)
        if refused.value is UNKNOWN:
            ctx.note(f"not decided for {name}={value!r}: whether vLLM accepts it depends on {refused.reasons()}")
        if refused.certain:
            hits.append(_refused_variable(tree, name, value, refused))
    return hits + _environment_validations(ctx, p, {h.key for h in hits})


def _refused_variable(tree: SourceTree, name: str, value: str, refused: Verdict) -> _Hit:
    """A variable whose value the served source refuses on every path, at the first statement that refuses it."""
    site = refused.outcomes[0].site
    where = f"{tree.relpath(site.module.path)}:{getattr(site.node, 'lineno', 0)}"
    return _Hit(name, {"variable": name, "value": value, "raised": site.message, "where": where})


def _environment_validations(ctx: Context, p: EnvironmentParams, judged: set[str]) -> list[_Hit]:
    """The served source's validation of the whole environment at startup (0.34.0 refuses any
    VLLM_USE_V2_MODEL_RUNNER but `1`; with `--fail-on-environ-validation`, an unknown `VLLM_` variable), evaluated
    with the serving environment, then, where it may refuse, with each variable alone: one it refuses on every
    path is a hit (one `judged` already names is left to that verdict)."""
    tree = ctx.facts.tree
    found = [(v, f) for v in p.validations if (f := _function(tree, v.file, v.function)) is not None]
    if not found:
        return []
    engine_args = _engine_arguments(ctx, p.engine_args)

    def refusal(validation: EnvironmentValidation, module: ParsedModule, function: Any, owner: Any) -> Verdict:
        kwargs = {param: engine_args(name) for param, name in validation.arguments.items()}
        self_value = ClassRef(owner) if owner is not None else None
        outcomes = ctx.reach.run(module, function, owner, self_value, kwargs)
        return verdict([o for o in outcomes if o.site.kind in ("raise", "assert")])

    if all(refusal(v, *f).value is False for v, f in found):
        return []
    hits: list[_Hit] = []
    for name, value in sorted(environment.current().values.items()):
        if name in judged:
            continue
        with environment.served_environment({name: value}):
            refused = next((r for v, f in found if (r := refusal(v, *f)).certain), None)
        if refused is not None:
            hits.append(_refused_variable(tree, name, value, refused))
    return hits


def _engine_arguments(ctx: Context, engine_args: str) -> Callable[[str], Any]:
    """A field of the engine arguments (`file:Class`) as the served source holds it for this config: the option
    given, else the class's declared default."""
    file, _, name = engine_args.partition(":")
    module = ctx.facts.tree.module_for_path(file)
    cls = module.classes.get(name) if module is not None else None
    if cls is None:
        return lambda field: ctx.situation.given.get(field, UNKNOWN)
    args = Obj(cls, dict(ctx.situation.given), defaults=True, label=name)
    return lambda field: ctx.situation.value_of(args, field)


def _raised_name(node: ast.AST) -> str | None:
    """The name of the class a `raise` statement raises, as written (`raise X(...)`, `raise X`)."""
    exc = getattr(node, "exc", None)
    if isinstance(exc, ast.Call):
        exc = exc.func
    if isinstance(exc, ast.Attribute):
        return exc.attr
    return exc.id if isinstance(exc, ast.Name) else None


# -- values the served source must define -------------------------------------------------------------------------


def _accepted(value: str, accepted: list[str]) -> str:
    """Close spellings first when the value looks like a typo; otherwise everything the source accepts."""
    close = difflib.get_close_matches(value, accepted, n=3, cutoff=0.75)
    return ", ".join(close) if close else ", ".join(accepted)


def _enum_hit(value: str | None, key: str, p: SourceEnumParams, facts: SourceFacts) -> list[_Hit]:
    if value is None:
        return []
    accepted = facts.accepted_values(p.file, p.symbol)
    if not accepted:
        raise NotJudged(
            f"whether the served source accepts {value!r} is read from `{p.symbol}` in {p.file}, which it does not "
            f"define{_unreadable(facts.tree)}"
        )
    if value in accepted:
        return []
    return [_Hit(key, {"value": value, "method": value, "accepted": _accepted(value, accepted)})]


def _cfg106(ctx: Context, p: SourceEnumParams) -> list[_Hit]:
    return _enum_hit(ctx.written.method, "speculative-config.method", p, ctx.facts)


def _cfg111(ctx: Context, p: SourceEnumParams) -> list[_Hit]:
    return _enum_hit(ctx.cfg.cudagraph_mode, "compilation-config.cudagraph_mode", p, ctx.facts)


def _cfg112(ctx: Context, p: SourceEnumParams) -> list[_Hit]:
    hits = _enum_hit(ctx.cfg.attention_backend, "attention-backend", p, ctx.facts)
    hits += _enum_hit(ctx.cfg.draft_backend, "speculative-config.attention_backend", p, ctx.facts)
    return hits


def _cfg118(ctx: Context, p: ValidationParams) -> list[_Hit]:
    if ctx.cfg.speculative_config is None:
        return []
    named = ctx.evidence_texts
    found = [(e, f) for e in p.entries if (f := _function(ctx.facts.tree, e.file, e.function)) is not None]
    if not found:
        raise NotJudged(f"none of {', '.join(e.function for e in p.entries)} is in the served source")
    for entry, (module, function, owner) in found:
        refusals = [
            o
            for o in ctx.reach.reached(module, function, owner)
            if o.site.kind in ("raise", "assert") and not o.path and not o.caught
        ]
        refusals = [o for o in refusals if not any(text in o.site.message for text in named)]
        if refusals:
            raised, where = _site_where(refusals, ctx)
            return [_Hit(entry.key, {"raised": raised, "where": where})]
    return []


EVALUATORS: dict[str, HazardCheck] = {
    "CFG101": _cfg101,
    "CFG102": _cfg102,
    "CFG103": _cfg103,
    "CFG104": _cfg104,
    "CFG105": _cfg105,
    "CFG106": _cfg106,
    "CFG107": _cfg107,
    "CFG108": _cfg108,
    "CFG109": _cfg109,
    "CFG110": _cfg110,
    "CFG111": _cfg111,
    "CFG112": _cfg112,
    "CFG113": _cfg113,
    "CFG114": _cfg114,
    "CFG115": _cfg115,
    "CFG116": _cfg116,
    "CFG117": _cfg117,
    "CFG118": _cfg118,
}


class _Facts(dict[str, Any]):
    """A hazard's facts for its message: a placeholder the evaluator did not find facts for (a catalogue passed
    with --hazards naming one) stays as written, never a crash."""

    def __missing__(self, name: str) -> str:
        return "{" + name + "}"


def _render(hazard: Hazard, hit: _Hit, ctx: Context) -> ConfigFinding:
    values = _Facts(source=ctx.facts.label, **hit.facts)
    return ConfigFinding(
        code=hazard.code,
        severity=hazard.severity,
        message=" ".join(f"{hazard.message.format_map(values)} {hit.assumption}".split()),
        key=hit.key,
        fix=" ".join(hazard.fix.format_map(values).split()),
        value=_value_of(ctx, hit.key),
    )


def _value_of(ctx: Context, key: str) -> str | None:
    """What the config judged holds at `key`: an option as the served source derives it (`speculative-config.method`
    inferred), or a variable of the serving environment; None where `key` names neither."""
    if key.isupper():
        return environment.current().values.get(key)
    value: Any = ctx.cfg
    for part in key.split("."):
        value = (
            value.get(part.replace("-", "_"))
            if isinstance(value, dict)
            else getattr(value, part.replace("-", "_"), None)
        )
        if value is None:
            return None
    if hasattr(value, "model_dump"):
        return None  # a whole section: the message says which of its options
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


NO_SOURCE = "no vLLM source to judge it against"
# The code paths vLLM picks from its environment: which variables, unset, decided a branch of a verdict.
ENV_NOTE = "judged with these variables unset in the serving environment (pass --env NAME=VALUE where they are set)"


def _judge_one(ctx: Context, hazard: Hazard, judgement: Judgement) -> None:
    code = hazard.code
    try:
        with ctx.facts.tree.tracking_gaps() as gaps:
            hits = EVALUATORS[code](ctx, hazard.params)
        if not hits and gaps:  # what it looks for may lie in what could not be read: never a silent clean verdict
            raise NotJudged(f"its evidence leads to modules that could not be read: {'; '.join(gaps.values())}")
    except (NotJudged, SourceLeftUnread) as exc:
        judgement.not_judged[code] = str(exc)
        return
    except OutOfBudget as exc:
        judgement.not_judged[code] = f"too costly to evaluate ({exc})"
        return
    except Exception as exc:  # noqa: BLE001 - a fork's unusual source must cost one hazard, not the run
        judgement.not_judged[code] = f"reading the source failed ({type(exc).__name__}: {exc})"
        return
    judgement.findings += [_render(hazard, hit, ctx) for hit in hits]


def evaluate(cfg: ServingConfig, catalogue: Catalogue, facts: SourceFacts | None) -> Judgement:
    judgement = Judgement(source=facts.label if facts else None)
    if facts is None:
        judgement.not_judged = {code: NO_SOURCE for code in sorted(catalogue.hazards)}
        return judgement
    with run_budget(), environment.ensured():
        served = served_method(cfg, facts)
        if len(served.candidates) > 1:
            _judge_each_method(cfg, catalogue, facts, served, judgement)
            return judgement
        if served.candidates:  # every way through the derivation arrives at one method
            served = ServedMethod(served.candidates[0])
            if served.method != cfg.method:
                judgement.notes.append(
                    f"speculative-config.method is '{served.method}' on every way through {facts.label}'s "
                    "derivation of it: the hazards are judged for it"
                )
        if served.undecided and served.method is not None:
            judgement.notes.append(
                f"judged for speculative-config.method '{served.method}' as written; {served.undecided}"
            )
        if served.where:
            written = f"not {cfg.method!r} as written" if cfg.method else "where the config leaves it out"
            judgement.notes.append(
                f"speculative-config.method is '{served.method}' as {facts.label} derives it ({served.where}), "
                f"{written}: the hazards are judged for it"
            )
        ctx = Context(cfg, facts, served)
        ctx.evidence_texts = _named_raises(catalogue)
        _judge_all(ctx, catalogue, judgement)
    return judgement


def _judge_each_method(
    cfg: ServingConfig, catalogue: Catalogue, facts: SourceFacts, served: ServedMethod, judgement: Judgement
) -> None:
    """The method vLLM derives is one of `served.candidates`, depending on what it reads at startup (the first: the
    one written, or what every path sets it to first): every hazard is judged for each. A verdict they share
    stands; a hazard of the first stands, as for the method written; another they differ on is not judged,
    saying which has it: never a clean verdict that another method it may be would not have."""
    each: dict[str, Judgement] = {}
    for method in served.candidates:
        each[method] = Judgement(source=judgement.source)
        ctx = Context(cfg, facts, ServedMethod(method))
        ctx.evidence_texts = _named_raises(catalogue)
        _judge_all(ctx, catalogue, each[method])
    first = each[served.candidates[0]]
    shown = ", ".join(f"'{m}'" for m in served.candidates)
    judgement.notes.append(
        f"speculative-config.method is one of {shown}: {served.undecided}; each is judged, and a hazard of "
        f"'{served.candidates[0]}' reported"
    )
    for code in sorted(catalogue.hazards):
        verdicts = {m: _verdict_of(j, code) for m, j in each.items()}
        if len(set(verdicts.values())) == 1 or any(f.code == code for f in first.findings):
            judgement.findings += [f for f in first.findings if f.code == code]
            if code in first.not_judged:
                judgement.not_judged[code] = first.not_judged[code]
        else:
            said = "; ".join(f"'{m}' {v}" for m, v in verdicts.items())
            judgement.not_judged[code] = f"it depends on the speculative method vLLM derives at startup ({said})"
    for j in each.values():
        judgement.notes += [n for n in j.notes if n not in judgement.notes]
        for name, codes in j.assumed_unset.items():
            judgement.assumed_unset[name] = list(dict.fromkeys([*judgement.assumed_unset.get(name, []), *codes]))


def _verdict_of(judgement: Judgement, code: str) -> str:
    if code in judgement.not_judged:
        return "is not judged"
    fired = sorted({f.severity for f in judgement.findings if f.code == code})
    return f"has it ({', '.join(fired)})" if fired else "has not"


def _named_raises(catalogue: Catalogue) -> list[str]:
    """The texts of the raises the catalogue's hazards name as their evidence."""
    out = []
    for hazard in catalogue.hazards.values():
        evidence = getattr(hazard.params, "evidence", [])
        out += [e.text for e in (evidence if isinstance(evidence, list) else [evidence]) if e.kind == "raise"]
    return out


def _judge_all(ctx: Context, catalogue: Catalogue, judgement: Judgement) -> None:
    facts = ctx.facts
    env = environment.current()
    assumed: dict[str, list[str]] = {}
    start = len(env.decided)
    with contextlib.suppress(Exception):  # a situation that cannot be built leaves each hazard not judged, with why
        _ = ctx.reach  # what every verdict starts from: the config as vLLM's code receives it
    for name in env.decided_unset(start):
        assumed.setdefault(name, []).append("all")
    for code, hazard in sorted(catalogue.hazards.items()):
        ctx.code = code
        start = len(env.decided)
        _judge_one(ctx, hazard, judgement)
        for name in env.decided_unset(start):
            if assumed.get(name) != ["all"]:
                assumed.setdefault(name, []).append(code)
    judgement.notes += ctx.notes
    judgement.assumed_unset = assumed
    if facts.tree.unreadable:
        judgement.notes.append(unreadable_files(facts.tree, limit=5))
    problems = list(
        dict.fromkeys(
            [*facts.analysis_problems, *ctx.reach.problems] if "reach" in ctx.__dict__ else facts.analysis_problems
        )
    )
    if problems:
        shown = "; ".join(problems[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        judgement.notes.append(f"`specguard check` could not analyze all of the source: {shown}{more}")
