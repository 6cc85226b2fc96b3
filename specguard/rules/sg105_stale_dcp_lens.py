"""SG105 stale-dcp-lens: the shared helper builds draft metadata with stale DCP rank-local lengths."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from specguard.evaluation.choices import Choices, each_path
from specguard.evaluation.hooks import Hooks
from specguard.evaluation.paths import Frame
from specguard.evaluation.values import (
    NOT_HANDLED,
    UNKNOWN,
    Abstract,
    Function,
    Label,
    Obj,
    Partial,
    labels_of,
    maybe_of,
    plain,
    relabelled,
    why_of,
)
from specguard.findings import Judgement
from specguard.program.ast_tools import annotation_names, walked
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext, report_judgements
from specguard.rules.judging import (
    MAX_DEPTH,
    OutOfBudget,
    Parameter,
    Question,
    Scope,
    aliases,
    bind_arguments,
    bind_parameters,
    callee,
    writes_of,
)

STATE, FRESH, PARAM = "state", "fresh", "param"  # the instance's state, lengths recomputed here, the caller's
ABSENT: Any = object()  # the build got no DCP-local lengths at all
# Annotations that say nothing of whose batch a parameter is (`attn_metadata: dict[str, Any]`): its name does.
_CONTAINERS = frozenset({"dict", "Dict", "Mapping", "Any", "str", "None", "Optional"})


class _Lengths(Hooks):
    """The shared helper run on its own: what the DCP-local lengths handed to each metadata build are."""

    def __init__(self, q: Question) -> None:
        self.q = q
        self.sinks, self.prepare = set(q.pack.metadata.sink), set(q.pack.dcp.prepare)
        # (the call written in the helper that reaches the build, the build, its lengths, the argument passed)
        self.sites: list[tuple[ast.AST, ast.Call, Any, ast.AST | None]] = []

    def call(
        self, ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame, state: Any
    ) -> Any:
        target = callee(func)
        if target is None or target.method:
            return NOT_HANDLED
        if target.name in self.sinks:
            bound = bind_arguments(target, args, kwargs, node)
            param = self.q.pack.metadata.dcp_param or ""
            value, passed, _ = bound.get(param, (ABSENT, None, ""))
            if value is ABSENT and any(kw.arg is None for kw in node.keywords) and "\0**" in kwargs:
                value = UNKNOWN  # a `**` mapping the evaluation could not read may hold them
            self.sites.append((ev.calls[0] if ev.calls else node, node, value, passed))
            return UNKNOWN
        if target.name in self.prepare:
            return _prepared(ev, target.name, node, frame, state)
        return NOT_HANDLED

    def reads(self, ev: Any, func: Any) -> frozenset[str] | None:
        target = callee(func)
        if target is None or target.method or target.name not in self.sinks:
            return None
        return frozenset({self.q.pack.metadata.dcp_param or ""})


class _Handed(Hooks):
    """A speculator's method run with the instance as state: the DCP-local lengths it hands each shared helper
    (which trusts what its caller hands it, so the verdict is the caller's)."""

    def __init__(self, q: Question, bound: set[str]) -> None:
        self.q = q
        self.helpers, self.prepare = set(q.pack.speculators.shared_helpers), set(q.pack.dcp.prepare)
        self.sites: list[tuple[ast.AST, Any, ast.AST | None, str]] = []
        self.builds: set[tuple[str, int]] = set()  # (file, line) of each call of a shared helper evaluated
        # attributes the module assigns something built from a helper (a partial of it): the only ones whose
        # writers are worth running (a preselection by reading, `judge`'s)
        self.bound = bound

    def instance_attribute(self, ev: Any, obj: Any, attr: str) -> Any:
        """A callable another method stored on the instance (a partial of a shared helper) is followed, what it
        binds being the instance's state by now; any other attribute is the instance's state as it is."""
        if obj.label != "self" or obj.cls is None or attr not in self.bound:
            return NOT_HANDLED
        value = self.q.instance_attributes("SG105").value(obj.cls, attr, None, self._writes)
        inner = plain(value)
        if not isinstance(inner, Partial):
            return NOT_HANDLED
        return Partial(
            inner.func,
            tuple(relabelled(a, _stored) for a in inner.args),
            {k: relabelled(v, _stored) for k, v in inner.kwargs.items()},
            inner.nodes,
        )

    def _writes(self, function: Function, me: Obj, writes: dict | None) -> list[tuple[Any, dict]]:
        # what the writer reads from the instance is its state there, as in the method judged
        me.labels = me.labels | {Label(STATE, "self")}
        return writes_of(self.q, _Handed(self.q, self.bound), function, me, _caller_parameter(self.q), writes)

    def round_ends(self, ev: Any, loop: ast.stmt, frame: Frame, state: Any) -> None:
        """A loop whose body builds through a shared helper is a loop of draft steps, each of which advances the
        draft's global lengths: lengths prepared (or handed in) before a step are an earlier step's on the next."""
        path, first, last = str(frame.module.path), loop.lineno, loop.end_lineno or loop.lineno
        steps = any(file == path and first <= line <= last for file, line in self.builds)
        if not steps and not _yields(loop):  # a generator's rounds are its consumer's: a step each, where it builds
            return
        for name, value in list(state.locals.items()):
            state.locals[name] = relabelled(value, _an_earlier_step)
        for key, value in list(state.writes.items()):
            state.writes[key] = relabelled(value, _an_earlier_step)

    def call(
        self, ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame, state: Any
    ) -> Any:
        target = callee(func)
        if target is None:
            return NOT_HANDLED
        if target.name in self.prepare and not target.method:
            return _prepared(ev, target.name, node, frame, state)
        if target.name not in self.helpers or not target.method:
            return NOT_HANDLED
        self.builds.add((str(frame.module.path), node.lineno))
        param = self.q.pack.metadata.dcp_param or ""
        value, passed, _ = bind_arguments(target, args, kwargs, node).get(param, (ABSENT, None, ""))
        if value is not ABSENT:
            self.sites.append((ev.calls[0] if ev.calls else node, value, passed, target.name))
        return UNKNOWN  # the helper itself is judged on its own


def _an_earlier_step(label: Label) -> Label:
    if label.kind not in (FRESH, PARAM):
        return label
    return Label(STATE, "prepared before an earlier draft step", label.span, label.path, label.origin, label.steps)


def _stored(label: Label) -> Label:
    if label.kind not in (FRESH, PARAM):
        return label
    return Label(STATE, "stored on the instance by another method", label.span, label.path, label.origin)


def _yields(loop: ast.stmt) -> bool:
    return any(isinstance(node, (ast.Yield, ast.YieldFrom)) for node in walked(loop))


def _prepared(ev: Any, name: str, node: ast.Call, frame: Frame, state: Any) -> Any:
    """The pack's DCP preparation recomputes the lengths into its first argument and returns them."""
    fresh = Abstract(frozenset({Label(FRESH, name)}))
    out = node.args[0] if node.args and not isinstance(node.args[0], ast.Starred) else None
    if isinstance(out, (ast.Name, ast.Attribute, ast.Subscript)):
        ev.assign(out, fresh, frame, state, node)
    return fresh


def _caller_parameter(q: Question) -> Parameter:
    """A parameter is the caller's lengths (the draft's own, as far as this method knows), except the target
    model's batch (by the pack's types, or an unannotated parameter by its names): what it holds is the target's."""
    types, names = set(q.pack.dcp.target_batch_types), set(q.pack.dcp.target_batch_params)

    def bind(param: ast.arg, frame: Frame) -> Any:
        annotated = annotation_names(param.annotation)
        if annotated & types or (param.arg in names and annotated <= _CONTAINERS):
            return Abstract(frozenset({Label(STATE, f"`{param.arg}`, the target model's batch")}))
        return Abstract(frozenset({Label(PARAM, param.arg)}))

    return bind


def judge(q: Question) -> Iterator[Judgement]:
    helpers = q.pack.speculators.shared_helpers
    dcp = q.pack.metadata.dcp_param or ""
    names = aliases(q, set(helpers))
    shared = [s for s in q.scopes if s.class_name in q.facts.base_classes and s.node.name in helpers]
    judged = [found for scope in shared if q.facts.sink_accepts_dcp for found in _judge_helper(q, scope)]
    # a build that a helper reaches through the other helper is reported in that helper when it is stale there
    # on its own; otherwise what this helper handed it made it so, and it is reported at this helper's call
    direct = {build for judgement, build, through in judged if not through and judgement.decided}
    yield from (judgement for judgement, build, through in judged if not (through and build in direct))
    for scope in q.scopes:
        speculator = scope.class_name in q.facts.speculator_classes
        if speculator and scope not in shared and _may_hand_lengths(scope, names, dcp):
            yield from _judge_caller(q, scope, names - set(helpers))


def _may_hand_lengths(scope: Scope, names: set[str], dcp: str) -> bool:
    """A preselection by reading: the method's body names a shared helper, or a name bound to one (a partial stored
    on the instance); an override of a helper is not thereby a caller. Whether it hands the lengths (by keyword, by
    position, in a mapping) is the evaluation's."""
    if not dcp or not scope.mentions(names):
        return False
    return any(
        isinstance(node, ast.Name) and node.id in names or isinstance(node, ast.Attribute) and node.attr in names
        for node in walked(scope.node)
    )


def _judge_caller(q: Question, scope: Scope, bound: set[str]) -> Iterator[Judgement]:
    """The lengths a speculator hands a shared helper: the instance's state (prepared before this call, by the
    target or an earlier step) is stale for a draft step; lengths it prepares here, or gets from its own caller,
    are the draft's own."""
    hooks = _Handed(q, bound)
    if not _ran(q, scope, hooks):
        yield q.out_of_budget("SG105", scope)
        return
    dcp = q.pack.metadata.dcp_param
    for node, value, passed, helper in hooks.sites:
        handed = ast.unparse(passed.value if isinstance(passed, ast.keyword) else passed) if passed is not None else dcp
        stale = sorted(x.text for x in labels_of(value) if x.kind == STATE)
        if stale:
            what = (
                "the instance's state, prepared before this call by the target model or an earlier step"
                if stale[0] == "self"
                else stale[0]
            )
            yield q.judgement(
                "SG105",
                scope,
                node,
                f"`{scope.qualname}` hands `{helper}` DCP rank-local lengths that are not the draft's own "
                f"(`{dcp}={handed}`: {what}, not recomputed here by `{q.pack.dcp.prepare[0]}`); the helper trusts "
                f"what it is handed, so draft steps attend with stale lengths",
            )
            return
        if any(x.kind == STATE for x in maybe_of(value)):
            why = "; ".join(why_of(value)) or "a value it could not evaluate"
            yield q.undecided("SG105", scope, node, f"`{dcp}=` of `{helper}`", why)
            return


def _ran(q: Question, scope: Scope, hooks: Hooks, choices: Choices | None = None) -> bool:
    """Run the method with the instance as state and its parameters as its caller's; False: out of budget."""
    me = q.self_value(scope, frozenset({Label(STATE, "self")}))
    try:
        ev = q.evaluator(hooks)
        ev.choices = choices
        ev.run(scope.function, bind_parameters(scope.function, me, _caller_parameter(q), q.program))
    except (OutOfBudget, RecursionError):
        return False
    return True


def _stale(sites: list[Any]) -> list[Any]:
    return [site for site in sites if any(x.kind == STATE for x in labels_of(site[2]))]


def _stale_on_a_path(q: Question, scope: Scope, noted: Choices) -> tuple[list[Any], str]:
    """Where the joined paths hide it, a path that builds with stale lengths (the preparation on the other side
    of a test, `if step == 0:`): its sites and the path's words."""
    if not noted.noted:
        return [], ""

    def run(choices: Choices) -> list[Any]:
        hooks = _Lengths(q)
        return hooks.sites if _ran(q, scope, hooks, choices) else []

    for path in each_path(run, noted) or []:  # more paths than it follows: the joined verdict stands
        if _stale(path.result):
            return _stale(path.result), f"on the path where {path.describe(str(scope.module.path))}"
    return [], ""


def _judge_helper(q: Question, scope: Scope) -> Iterator[tuple[Judgement, int, bool]]:
    """(judgement, the build it is about, whether this helper reaches it through a call) for the helper."""
    hooks = _Lengths(q)
    noted = Choices(frozenset({FRESH}))  # the tests that decide whether the lengths are recomputed
    if not _ran(q, scope, hooks, noted):
        yield q.out_of_budget("SG105", scope), 0, False
        return
    if not hooks.sites:
        return
    stale, on = _stale(hooks.sites), "on some path"
    if not stale:
        stale, on = _stale_on_a_path(q, scope, noted)
    sink, prepare, dcp = q.pack.metadata.sink[0], q.pack.dcp.prepare[0], q.pack.metadata.dcp_param
    if stale:
        node, build, _, passed = stale[0]
        handed = ast.unparse(passed.value if isinstance(passed, ast.keyword) else passed) if passed is not None else dcp
        yield (
            q.judgement(
                "SG105",
                scope,
                node,
                f"shared helper `{scope.qualname}` hands `{sink}` DCP rank-local lengths that are not the draft's own "
                f"{on} (`{handed}`: the instance's state, which the target model prepared, not recomputed there by "
                f"`{prepare}` and not from the caller); draft steps then attend with the target's stale lengths",
            ),
            id(build),
            node is not build,
        )
        return
    if all(value is ABSENT or plain(value) is None for _, _, value, _ in hooks.sites):
        node, build = hooks.sites[0][:2]
        yield (
            q.judgement(
                "SG105",
                scope,
                node,
                f"shared helper `{scope.qualname}` calls `{sink}` without recomputing DCP rank-local sequence "
                f"lengths (no `{prepare}` before it and no `{dcp}` from the caller); draft steps then attend with the "
                f"target's stale lengths",
            ),
            id(build),
            node is not build,
        )
        return
    for node, build, value, _ in hooks.sites:
        if any(x.kind == STATE for x in maybe_of(value)):
            why = "; ".join(why_of(value)) or "a value it could not evaluate"
            yield q.undecided("SG105", scope, node, f"`{dcp}=` of `{sink}`", why), id(build), node is not build
            return


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    for judgement in report_judgements("SG105", ctx):
        yield Diagnostic(None, judgement.message, judgement.scope, judgement.span)


def _helpers_here(facts, pack, mentions) -> bool:  # type: ignore[no-untyped-def]
    """A file defining the shared helpers where the sink takes DCP lengths, or a speculator calling them (with
    lengths only where the helper takes them)."""
    return (facts.sink_accepts_dcp and bool(facts.base_classes)) or bool(facts.speculator_classes)


RULE = Rule(
    code="SG105",
    name="stale-dcp-lens",
    title="shared helper builds draft metadata with stale DCP rank-local lengths",
    summary=(
        "Flags the speculator base's shared metadata helper when the DCP rank-local sequence lengths it hands the "
        "sink are not the draft's own on some path: the instance's state (which the target model prepared) not "
        "recomputed on that path by the DCP preparation, or no lengths on any path. Lengths recomputed before "
        "the build (the preparation's result, or the buffer it wrote) and lengths the caller handed in are the "
        "draft's own. A speculator that hands a shared helper lengths of its own is judged at that call: the "
        "instance's state (prepared before the call, by the target model or an earlier step) is stale there. "
        "Applies only where the sink accepts `dcp_local_seq_lens`."
    ),
    why=(
        "Draft steps advance and rewind their own global sequence lengths after sampling and rejection, so the "
        "rank-local lengths the target model prepared are stale by the time the draft attends. Under decode "
        "context parallelism the draft then reads the wrong KV range on every rank."
    ),
    analysis=(
        "The rule evaluates the helper on its own, along every path: its parameters are what the caller hands in, "
        "what it reads from `self` is the instance's state, and a call of the pack's DCP preparation "
        "(`prepare_dcp_local_seq_lens`) recomputes lengths into its first argument and returns them. The value "
        "reaching the sink's `dcp_local_seq_lens` is followed through locals, conditional expressions, slicing, "
        "`**kwargs` and helper methods; a path on which it is the instance's state, not recomputed there, is a "
        "finding, whatever the test that chose the path (`if self.dcp_size > 1`, a flag, the order of the calls). "
        "The helper trusts the lengths its caller hands it, so each speculator method that calls a shared helper is "
        "evaluated too, with the instance as state: lengths it hands the helper (by keyword, position, `**kwargs` "
        "or a `functools.partial`, also one another method stored on the instance) that are the instance's state, "
        "not recomputed in that method, are a finding at the call; so are lengths read from the target model's "
        "batch (`[dcp] target_batch_types`, or by name, `target_batch_params`, where its annotation is at most a "
        "dict of anything). Freshness is per "
        "draft step: a loop whose body calls a shared helper is a loop of draft steps, each of which advances the "
        "global lengths, so lengths prepared (or handed in) before a step are stale on the next one (prepared once "
        "before the loop, on the first step only, or yielded by a generator that prepared them once). Where the "
        "helper prepares on one side of a test and reads the buffer after it (`if step == 0: prepare(...)`), the "
        "joined paths read as fresh; each path through the tests that decide whether the lengths are recomputed "
        "is then evaluated on its own, and the path that reads the buffer unprepared is the finding.",
    ),
    bad="""
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens

        def build_attn_metadata(*, num_reqs, num_tokens, seq_lens, dcp_local_seq_lens=None):
            ...

        class DraftModelSpeculator:
            def _build_attn_metadata(self, num_reqs, num_tokens):
                if self.dcp_size > 1:  # recomputed into a buffer of its own, but not the one it hands on
                    prepare_dcp_local_seq_lens(
                        self.draft_dcp_local_seq_lens, self.input_buffers.seq_lens, num_reqs,
                        self.dcp_size, self.block_tables.cp_rank, self.block_tables.cp_interleave,
                    )
                return build_attn_metadata(
                    num_reqs=num_reqs, num_tokens=num_tokens, seq_lens=self.input_buffers.seq_lens,
                    dcp_local_seq_lens=self.input_buffers.dcp_local_seq_lens if self.dcp_size > 1 else None,
                )
    """,
    good="""
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens

        def build_attn_metadata(*, num_reqs, num_tokens, seq_lens, dcp_local_seq_lens=None):
            ...

        class DraftModelSpeculator:
            def _build_attn_metadata(self, num_reqs, num_tokens):
                lens = None
                if self.dcp_size > 1:
                    prepare_dcp_local_seq_lens(
                        self.input_buffers.dcp_local_seq_lens, self.input_buffers.seq_lens, num_reqs,
                        self.dcp_size, self.block_tables.cp_rank, self.block_tables.cp_interleave,
                    )
                    lens = self.input_buffers.dcp_local_seq_lens  # recomputed on this path, just above
                return build_attn_metadata(
                    num_reqs=num_reqs, num_tokens=num_tokens, seq_lens=self.input_buffers.seq_lens,
                    dcp_local_seq_lens=lens,
                )

        class BaseSpeculator:
            def _build_uniform_attn_metadata(self, num_reqs, num_tokens, dcp_local_seq_lens):
                return build_attn_metadata(  # the caller's own lengths
                    num_reqs=num_reqs, num_tokens=num_tokens, seq_lens=self.input_buffers.seq_lens,
                    dcp_local_seq_lens=dcp_local_seq_lens[:num_reqs],
                )
    """,
    check=check,
    applies=_helpers_here,
    judge=judge,
    limits=(
        Limit(
            "Lengths that come from a function the evaluation cannot read (of a package outside the analyzed tree) "
            "are unknown: whether they are the draft's own is not decided, and the helper is counted as not decided "
            "(`--statistics`, `-v`).",
            missed="""
                from myfork.cp import local_lengths

                def build_attn_metadata(*, num_reqs, num_tokens, seq_lens, dcp_local_seq_lens=None):
                    ...

                class DraftModelSpeculator:
                    def _build_attn_metadata(self, num_reqs, num_tokens):
                        lens = local_lengths(self.input_buffers.dcp_local_seq_lens, num_reqs)
                        return build_attn_metadata(
                            num_reqs=num_reqs, num_tokens=num_tokens, seq_lens=self.input_buffers.seq_lens,
                            dcp_local_seq_lens=lens,
                        )
            """,
        ),
        Limit(
            f"Calls are followed {MAX_DEPTH} deep: the instance's lengths handed on through a longer chain of "
            "helper methods are an unknown.",
            missed="""
                def build_attn_metadata(*, num_reqs, num_tokens, seq_lens, dcp_local_seq_lens=None):
                    ...

                class DraftModelSpeculator:
                    def _lens(self):
                        return self._lens1()

                    def _lens1(self):
                        return self._lens2()

                    def _lens2(self):
                        return self._lens3()

                    def _lens3(self):
                        return self._lens4()

                    def _lens4(self):
                        return self.input_buffers.dcp_local_seq_lens

                    def _build_attn_metadata(self, num_reqs, num_tokens):
                        return build_attn_metadata(
                            num_reqs=num_reqs, num_tokens=num_tokens, seq_lens=self.input_buffers.seq_lens,
                            dcp_local_seq_lens=self._lens(),
                        )
            """,
        ),
    ),
    references=(
        'vllm-project/vllm#54277 ("Enable FlashInfer MLA for DSpark drafting", in vLLM 0.29.0): the shared draft '
        "metadata helper recomputes the rank-local DCP sequence lengths from the draft's "
        "own global lengths before every build; vLLM 0.28.0's `DraftModelSpeculator._build_draft_attn_metadata` "
        "does not.",
    ),
)
