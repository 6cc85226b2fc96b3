"""SG103 padded-token-count: a DP/graph-padded token count reaches the metadata builder outside FULL mode."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

from specguard.evaluation.annotations import annotated
from specguard.evaluation.hooks import Hooks
from specguard.evaluation.paths import Frame, doubts, join_values
from specguard.evaluation.values import (
    NOT_HANDLED,
    UNKNOWN,
    Abstract,
    Bound,
    EnumMember,
    Function,
    Label,
    Many,
    Mapping,
    Method,
    Obj,
    OneOf,
    Tagged,
    labels_of,
    maybe_of,
    nearest,
    place_text,
    plain,
    why_of,
    with_labels,
)
from specguard.file_facts import FileFacts
from specguard.findings import Judgement
from specguard.fix_model import Edit, NodeFix, NoFix
from specguard.fixes.ast_edits import enclosing_statement, indent_unit, place
from specguard.fixes.import_edits import add_import
from specguard.fixes.layout import Layout, flat
from specguard.fixes.query_count import QueryNames, Reached, real_count
from specguard.packs import Pack
from specguard.program.ast_tools import annotation_names, cached_on, dotted, has_decorator, source_segment, span, walked
from specguard.program.signatures import signature
from specguard.program.tree import ClassInfo
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext, speculator_module
from specguard.rules.judging import (
    MAX_DEPTH,
    Callee,
    OutOfBudget,
    Question,
    Scope,
    aliases,
    bind_arguments,
    bind_parameters,
    callee,
    inherited_annotations,
    writes_of,
)

# label kinds: a padded count, the batch's mode, a rank's count, a capacity (which bounds every real count)
PADDED, MODE, DP_COUNT, CAPACITY = "padded", "mode", "dp-count", "capacity"


class Passed(NamedTuple):
    """An argument of the flagged call, as the fix reads it."""

    node: ast.AST
    keyword: str | None
    star: str  # "", "*" or "**"


class _Counts(Hooks):
    """One run of a function with the batch's CUDA-graph mode fixed to `mode`: what the pack's sources mean, and
    what each metadata build's token-count argument is."""

    subjects = frozenset({MODE})
    value_kinds = frozenset({PADDED, DP_COUNT})
    traced = frozenset({PADDED})
    bound_kinds = frozenset({CAPACITY})

    def __init__(
        self,
        q: Question,
        mode: Tagged,
        enum: ClassInfo,
        record: bool = True,
        subject: str | None = None,
        modes: tuple[EnumMember, ...] = (),
    ) -> None:
        self.q, self.mode, self.enum, self.record = q, mode, enum, record
        # With several descriptors, each is its own batch: the one named `subject` runs in `mode`, the others in
        # any mode (None: every descriptor in `mode`).
        self.subject, self.any_mode = subject, OneOf(modes) if len(modes) > 1 else UNKNOWN
        members = tuple(EnumMember(enum, m) for m in q.program.enum_members(enum))
        self.setting = OneOf(members, frozenset({Label(MODE)})) if len(members) > 1 else UNKNOWN
        self.origins: set[str] = set()
        pad, meta = q.pack.padding, q.pack.metadata
        self.sinks, self.helpers = set(meta.sink), set(q.pack.speculators.shared_helpers)
        self.count_params = frozenset(meta.token_count_params)
        self.producers, self.padded_producers = set(pad.descriptor_producers), set(pad.padded_producers)
        self.descriptor_types, self.padded_names = set(pad.descriptor_types), set(pad.padded_names)
        self.descriptor_params = frozenset(pad.descriptor_params)
        self.dp_counts, self.capacities = set(pad.dp_rank_counts), set(pad.capacities)
        # (call in the function, callee, parameter, argument, its value, the path's undecided tests, where the build
        # itself is: (file, span), in a helper the call reached or the call itself, what the call reaches, the
        # descriptors the build is handed, by origin, there or at the call into the helper that reaches it)
        self.sites: list[tuple[ast.AST, str, str, Passed | None, Any, frozenset, Any, Callee, frozenset[str]]] = []
        self.handed: dict[int, frozenset[str]] = {}  # a build call's node -> the descriptors it is handed
        self.entries: dict[str, Obj] = {}  # the descriptor at each constant key of a mapping of descriptors

    # ---- the pack's sources ----------------------------------------------------------------------------------

    def padded(self, text: str, node: ast.AST | None, value: Any = UNKNOWN, origin: str = "", ev: Any = None) -> Any:
        """A padded count read at `node`, in the file the evaluation `ev` is in (a followed call's may be another)."""
        where = span(node) if node is not None else None
        elsewhere = ev is not None and ev.here is not None and ev.here != ev.home
        path = str(ev.here) if elsewhere else self.q.path
        return with_labels(value, frozenset({Label(PADDED, text, where, path, origin)}))

    def descriptor(self, text: str, node: ast.AST | None) -> Obj:
        pad = self.q.pack.padding
        origin = f"{text}@{span(node)}" if node is not None else text
        self.origins.add(origin)
        mode = self.mode if self.subject in (None, origin) else self.any_mode
        fields = {
            pad.mode_attribute or "": mode,
            **{
                name: self.padded(f"{text}.{name}", None, origin=origin)
                for name in [pad.padded_attribute or "", *pad.padded_fields]
            },
        }
        return Obj(None, fields, label="descriptor", labels=frozenset({Label(MODE, origin=origin)}))

    def parameter(self, param: ast.arg, frame: Frame) -> Any:
        return self._parameter(param, frame, batch=False)

    def entry_parameter(self, param: ast.arg, frame: Frame) -> Any:
        """A parameter of the judged function itself: one of the mode enum is the mode of the batch it builds for."""
        return self._parameter(param, frame, batch=True)

    def _parameter(self, param: ast.arg, frame: Frame, batch: bool) -> Any:
        if param.annotation is not None:
            value = annotated(param.annotation, lambda leaf: self.annotation(None, leaf, frame, batch))
            if value is not NOT_HANDLED:
                return value
        if param.arg in self.q.pack.padding.descriptor_params:
            return self.descriptor(param.arg, param)
        if param.arg in self.padded_names:
            return self.padded(param.arg, param)
        if param.arg in self.dp_counts:
            return Many(Abstract(frozenset({Label(DP_COUNT, param.arg)})))
        if param.annotation is not None:  # an instance of a class of the tree: its fields are what they promise
            typed = annotated(param.annotation, lambda leaf: self._instance_of(leaf, frame))
            if typed is not NOT_HANDLED:
                return typed
        return UNKNOWN

    def _instance_of(self, annotation: ast.expr, frame: Frame) -> Any:
        text = dotted(annotation)
        found = self.q.program.resolve(frame.module.name, text) if text is not None else None
        return Abstract(kind=found) if isinstance(found, ClassInfo) else NOT_HANDLED

    def annotation(self, ev: Any, annotation: ast.expr, frame: Frame, batch: bool = False) -> Any:
        """A name in an annotation: the descriptor types and the mode enum (the evaluator reads the containers
        around them). A mode is the batch's only where the judged function is handed it (`batch`); elsewhere (a
        CUDA-graph manager's configured mode, a method storing one) it is a setting of the process, any member."""
        names = annotation_names(annotation)
        if names & self.descriptor_types:
            return self.descriptor(ast.unparse(annotation), annotation)
        text = dotted(annotation)
        if text is not None and self._is_mode_enum(text, frame):
            return self.mode if batch else self.setting
        return NOT_HANDLED

    def _is_mode_enum(self, text: str, frame: Frame) -> bool:
        if text.rpartition(".")[2] != self.enum.name:
            return False
        found = self.q.program.resolve(frame.module.name, text)
        return not isinstance(found, ClassInfo) or found.key == self.enum.key

    # ---- calls: the sinks it watches, the producers it knows ---------------------------------------------------

    def _build(self, target: Callee | None) -> bool:
        """A metadata build: the sink, or a shared helper called as a method."""
        if target is None:
            return False
        return (target.name in self.sinks and not target.method) or (target.name in self.helpers and target.method)

    def call(
        self, ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Any, state: Any
    ) -> Any:
        inner = plain(func)
        if isinstance(inner, Method) and inner.name.rpartition(".")[2] == "get" and args:
            entry = self._entry(inner.receiver, args[0], node.func)
            if entry is not None:  # where the key is missing, the default: tested wherever the entry is
                return entry
        target = callee(func)
        if target is None:
            return NOT_HANDLED
        if self._build(target):
            self.handed[id(node)] = _descriptors_in([*args, *kwargs.values()])
            if self.record:
                self._site(ev, target, args, kwargs, node, frame, state)
            # a shared helper the project defines decides the count from what it is handed (the descriptor's mode,
            # the query's offsets): followed, so the sink inside it is judged with the caller's values
            return NOT_HANDLED if self._followed(target) else UNKNOWN
        if not target.method and target.name in self.producers:
            function = target.function
            value = ev.promised(function.module, function.owner, function.node) if function is not None else UNKNOWN
            return self._this_batch(value, f"{target.name}(...)", node)
        if target.name in self.padded_producers:
            return self.padded(f"{target.name}(...)", node, ev=ev)
        if self._dispatcher(func) and not _descriptors_in([*args, *kwargs.values()]):
            return self.descriptor(_call_text(node), node)  # (one handed a descriptor rebuilds that batch's)
        return NOT_HANDLED

    def _this_batch(self, promised: Any, text: str, node: ast.Call) -> Any:
        """What a producer returns at this call: the shape its annotation promises (a collection of descriptors
        where it says nothing), with a descriptor of this call's own batch where it promises one (two dispatches
        in one function are two batches)."""
        if promised is UNKNOWN:
            return Many(self.descriptor(text, node))

        def fresh(value: Any) -> Any:
            if isinstance(value, tuple):
                return tuple(fresh(item) for item in value)
            if isinstance(value, Obj) and value.label == "descriptor":
                self.origins -= _descriptors_in([value])  # the annotation's, not a batch
                return self.descriptor(text, node)
            return value

        return fresh(promised)

    def _dispatcher(self, func: Any) -> bool:
        """A method of another object (a CUDA-graph manager's `dispatch`) that promises a descriptor: what it
        returns is the decision for this call's batch, not something to follow into."""
        func = plain(func)
        if not isinstance(func, Bound) or isinstance(func.func.node, ast.Lambda):
            return False
        receiver = plain(func.self_value)
        returns = func.func.node.returns
        if returns is None or (isinstance(receiver, Obj) and receiver.label == "self"):
            return False
        names = annotation_names(returns) - {"None", "Optional"}
        return bool(names) and names <= self.descriptor_types

    def _followed(self, target: Callee) -> bool:
        """A shared helper the project defines that takes no token count of its own: it decides the count from what
        it is handed, so it is followed (a helper taking one is judged at that argument)."""
        if target.name not in self.helpers or target.function is None or isinstance(target.function.node, ast.Lambda):
            return False
        spec = target.function.node.args
        names = {a.arg for a in [*spec.posonlyargs, *spec.args, *spec.kwonlyargs]}
        return not names & self.count_params

    def reads(self, ev: Any, func: Any) -> frozenset[str] | None:
        target = callee(func)
        if target is None or not self._build(target) or self._followed(target):
            return None
        return self.count_params | self.descriptor_params  # the count, and the batch it is for

    def _site(
        self, ev: Any, target: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Any, state: Any
    ) -> None:
        outer = ev.calls[0] if ev.calls else node
        for param, (value, passed, how) in bind_arguments(target, args, kwargs, node).items():
            if param not in self.count_params:
                continue
            arg = None
            if outer is node and passed is not None and _inside(self.scope_node, passed):
                keyword = passed.arg if isinstance(passed, ast.keyword) else None
                arg = Passed(passed, keyword, how)
            build = (str(frame.module.path), span(node))
            handed = self.handed.get(id(node), frozenset()) | self.handed.get(id(outer), frozenset())
            self.sites.append((outer, target.name, param, arg, value, state.path, build, target, handed))

    def subscript(self, ev: Any, base: Any, key: Any, node: ast.AST | None) -> Any:
        entry = self._entry(base, key, node.value if isinstance(node, ast.Subscript) else None)
        return NOT_HANDLED if entry is None else entry

    def _entry(self, mapping: Any, key: Any, node: ast.AST | None) -> Obj | None:
        """A descriptor read from a mapping of descriptors by a constant key: the batch at that key, the same at
        each read (two keys are two batches, as two dispatches are)."""
        inner, k = plain(mapping), plain(key)
        if not isinstance(inner, Mapping) or not isinstance(k, (str, int)) or isinstance(k, bool):
            return None
        value = plain(inner.value)
        if not (isinstance(value, Obj) and value.label == "descriptor"):
            return None
        base = node.value if isinstance(node, ast.Attribute) else node  # `descs.get` -> `descs`
        text = f"{ast.unparse(base) if base is not None else '?'}[{k!r}]"
        if text not in self.entries:
            self.entries[text] = self.descriptor(text, None)
        return self.entries[text]

    def attribute(self, ev: Any, base: Any, attr: str, value: Any, node: ast.AST | None, state: Any) -> Any:
        inner = plain(base)
        if isinstance(value, EnumMember) and value.cls.key == self.enum.key:
            # a member of the mode enum: a test of something against it is a test of a mode, which the verdict
            # must name when the evaluation cannot decide it (a mode it does not know, not the batch's)
            return Tagged(value, frozenset({Label(MODE)}))
        batches = _descriptors_in([base])  # a descriptor another method stored, perhaps: a batch of its own
        self.origins |= batches
        if batches and attr == self.q.pack.padding.mode_attribute and self.subject is not None:
            # each batch's mode as this run fixes it: the subject's, or any other
            modes = [self.mode if origin == self.subject else self.any_mode for origin in sorted(batches)]
            return modes[0] if len(modes) == 1 else join_values([(m, frozenset()) for m in modes])
        element = plain(inner.element) if isinstance(inner, Many) else None
        if isinstance(element, Obj) and element.label == "descriptor":
            return ev.getattr(element, attr, state, 0, node=node)  # a producer we cannot read: its result
        if attr in self.capacities:
            return with_labels(value, frozenset({Label(CAPACITY, attr)}))
        if attr in self.padded_names:
            return self.padded(ast.unparse(node) if node is not None else attr, node, value, ev=ev)
        if attr in self.dp_counts:
            return Many(Abstract(frozenset({Label(DP_COUNT, attr)})))
        padded = [x for x in labels_of(value) if x.kind == PADDED]
        if padded and node is not None and isinstance(inner, Obj) and attr == self.q.pack.padding.padded_attribute:
            base_value = plain(value) if not isinstance(value, Abstract) else UNKNOWN
            return self.padded(ast.unparse(node), node, base_value, nearest(padded).origin, ev=ev)
        return NOT_HANDLED

    def rounded(self, ev: Any, value: Any, divisor: str) -> frozenset[Label]:
        """A count rounded to a multiple (of an alignment, a bucket width) may be larger than the count: padded,
        whatever the helper that rounds it is called (a count padded already says where it was read)."""
        if any(x.kind == PADDED for x in labels_of(value)):
            return frozenset()
        return frozenset({Label(PADDED, f"a count rounded to a multiple of {divisor}", None, self.q.path)})

    def at_least(self, ev: Any, value: Any, bound: Any, node: ast.AST) -> frozenset[Label]:
        """A size chosen for being at least a count (the next captured graph size) is the count padded."""
        if any(x.kind == PADDED for x in labels_of(value)):
            return frozenset()
        text = f"a size chosen at least as large as `{ast.unparse(node)}`"
        return frozenset({Label(PADDED, text, span(node), str(ev.here) if ev.here is not None else self.q.path)})

    def reduced(self, ev: Any, name: str, inputs: list[Any], node: ast.AST | None) -> frozenset[Label]:
        """The largest of the ranks' counts is the count every rank pads to."""
        if name in ("max", "amax") and any(x.kind == DP_COUNT for v in inputs for x in labels_of(v)):
            text = ast.unparse(node) if node is not None else name
            return frozenset({Label(PADDED, text, span(node) if node is not None else None, self.q.path)})
        return frozenset()

    def instance_attribute(self, ev: Any, obj: Any, attr: str) -> Any:
        if obj.label != "self" or obj.cls is None:
            return NOT_HANDLED
        attributes = self.q.instance_attributes("SG103")
        mode = plain(self.mode)
        key = mode.name if isinstance(mode, EnumMember) else "|".join(m.name for m in mode.options)
        return attributes.value(obj.cls, attr, key, self._writes, self.traced)

    def _writes(self, function: Function, me: Obj, writes: dict | None) -> list[tuple[Any, dict]]:
        # run once per mode: a descriptor another method stores is a batch of its own, whose mode the reading
        # run decides where it reads it (`attribute`)
        hooks = _Counts(self.q, self.mode, self.enum, record=False)
        return writes_of(self.q, hooks, function, me, hooks.parameter, writes)

    def counts(self, value: Any, handed: frozenset[str] = frozenset()) -> tuple[list[Label], list[Label]]:
        """The padded labels of a value that this run judges: of its subject descriptor, or of no descriptor; of
        any descriptor where the build is handed the subject (a count padded for another batch is padded for this
        one too): (derived on a path followed in full, perhaps derived)."""
        mine = ("", self.subject) if self.subject is not None and self.subject not in handed else None

        def judged(labels: frozenset[Label]) -> list[Label]:
            return [x for x in labels if x.kind == PADDED and (mine is None or x.origin in mine)]

        return judged(labels_of(value)), judged(maybe_of(value))

    scope_node: ast.AST | None = None


def _descriptors_in(values: list[Any]) -> frozenset[str]:
    """The batches (origins) of the descriptors among `values` (a call's arguments; one of a few values too)."""
    found: set[str] = set()
    for value in values:
        inner = plain(value)
        for option in inner.options if isinstance(inner, OneOf) else (inner,):
            if isinstance(option, Obj) and option.label == "descriptor":
                found.update(x.origin for x in option.labels if x.kind == MODE)
    return frozenset(found)


def _inside(outer: ast.AST | None, node: ast.AST) -> bool:
    if outer is None:
        return False
    first, last = outer.lineno, outer.end_lineno or outer.lineno  # type: ignore[attr-defined]
    return first <= getattr(node, "lineno", 0) <= last


def _runtime_modes(q: Question) -> tuple[ClassInfo, list[EnumMember]] | None:
    """The mode enum, and the runtime modes a batch may run in."""
    pad = q.pack.padding
    if not pad.mode_enum:
        return None
    module, _, name = pad.mode_enum.rpartition(".")
    found = q.program.resolve(module, name)
    if not isinstance(found, ClassInfo):
        return None
    members = q.program.enum_members(found)
    return found, [EnumMember(found, m) for m in pad.runtime_modes if m in members]


def _candidates(q: Question) -> list[Scope]:
    """The functions of speculators that can hand a metadata build a token count: they call a build (a sink or a
    shared helper, or an alias of one) or `partial`/`dict` with a token-count keyword, spread arguments or (a
    build) several positional ones, name a token-count parameter as a dict key, or call such a function of this
    module. A preselection by reading, so that only these are evaluated: the verdict is the evaluation's."""
    sinks = aliases(q, set(q.pack.metadata.sink) | set(q.pack.speculators.shared_helpers))
    counts = set(q.pack.metadata.token_count_params)
    handed = {s for s in q.scopes if _handed_the_mode(q, s)}
    direct = set(q.pack.metadata.sink)
    scopes = [s for s in q.scopes if _speculator_scope(q, s) or s in handed or s.mentions(direct)]
    found = {s for s in scopes if s.mentions(sinks) or s.mentions(counts)}
    # a function handed its batch's mode may build through a callable its class stored (a dict of builders):
    # any call given a token count is a build to evaluate there
    found = {s for s in found if _passes_a_count(s.node, sinks, counts, any_callee=s in handed)}
    grew = True
    while grew:  # a function calling a helper of the module that passes one does too
        grew = False
        for scope in scopes:
            if scope not in found and scope.mentions({f.node.name for f in found}):
                found.add(scope)
                grew = True
    return [s for s in scopes if s in found]


def _passes_a_count(node: ast.AST, sinks: set[str], counts: set[str], any_callee: bool = False) -> bool:
    for sub in walked(node):
        if isinstance(sub, ast.Call):
            name = sub.func.attr if isinstance(sub.func, ast.Attribute) else getattr(sub.func, "id", None)
            if name not in sinks and name not in ("partial", "dict") and not any_callee:
                continue
            if name in sinks and (sub.args or sub.keywords):
                return True  # a build decides its count from what it is handed: a descriptor, offsets, requests
            spread = any(kw.arg is None for kw in sub.keywords) or any(isinstance(a, ast.Starred) for a in sub.args)
            if any(kw.arg in counts for kw in sub.keywords) or spread:
                return True
        elif isinstance(sub, ast.Constant) and sub.value in counts:
            return True
    return False


def _handed_the_mode(q: Question, scope: Scope) -> bool:
    """A function of any class that calls the sink and is handed its batch's mode (a parameter annotated with the
    mode enum, as a model state's `prepare_attn(input_batch, cudagraph_mode, ...)` is, or a batch-execution
    descriptor): the count it builds with is judged against that mode, as a speculator's is."""
    pad = q.pack.padding
    marks = {(pad.mode_enum or "").rpartition(".")[2], *pad.descriptor_types} - {""}
    a = scope.node.args  # type: ignore[attr-defined]
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    inherited = {
        name: param.annotation for name, (param, _) in inherited_annotations(q.program, scope.function).items()
    }
    handed = any(
        marks & annotation_names(p.annotation or inherited.get(p.arg)) or p.arg in pad.descriptor_params for p in params
    )
    sinks = set(q.pack.metadata.sink)
    # the sink named in the function, or in a method of its class that may store it (`self._builders = {...}`)
    return handed and any(s.mentions(sinks) for s in q.scopes if s is scope or s.cls is not None and s.cls == scope.cls)


def _modeless(q: Question, scope: Scope) -> bool:
    """A function of no speculator, handed no mode or descriptor, that calls the sink: whether the batch it builds
    for runs a FULL graph is its callers' to say."""
    return not _speculator_scope(q, scope) and not _handed_the_mode(q, scope)


def _calls_the_sink(facts: FileFacts, pack: Pack, mentions: frozenset[str]) -> bool:
    return speculator_module(facts, pack, mentions) or bool(mentions & set(pack.metadata.sink))


def _speculator_scope(q: Question, scope: Scope) -> bool:
    if scope.class_name is None:
        return q.facts.is_speculator_module
    return scope.class_name in q.facts.speculator_classes


def judge(q: Question) -> Iterator[Judgement]:
    found = _runtime_modes(q)
    if found is None:
        return
    enum, every = found
    modes = [m for m in every if m.name != q.pack.padding.full_mode]  # a padded count is right only under FULL
    judged = [found for scope in _candidates(q) for found in _judge_scope(q, scope, enum, modes, every)]
    # a build in a helper that is judged on its own here is reported there, not again at each caller's call
    direct = {build for judgement, builds, through in judged if not through and judgement.decided for build in builds}
    for judgement, builds, through in judged:
        if not through or not builds <= direct:
            yield judgement


def _judge_scope(
    q: Question, scope: Scope, enum: ClassInfo, modes: list[EnumMember], all_modes: list[EnumMember]
) -> Iterator[tuple[Judgement, Any, bool]]:
    """(judgement, the builds it is about (file, span), whether one is reached through a helper) for each site the
    function hands a build a count at."""
    sites: dict[tuple[int, int, int, int], dict[str, Any]] = {}
    budget = False
    runs = _runs_that_may_find(q, scope, enum, modes, all_modes)
    while runs:
        member, subject = runs.pop(0)
        mode = Tagged(member, frozenset({Label(MODE, member.name)}))
        hooks = _Counts(q, mode, enum, subject=subject, modes=tuple(all_modes))
        budget = not _ran(q, scope, hooks) or budget
        for outer, name, param, arg, value, path, build, target, handed in hooks.sites:
            where = arg.node if arg is not None else outer
            site = sites.setdefault(
                span(where), {"node": where, "callee": name, "param": param, "arg": arg, "call": outer, "to": target}
            )
            site.setdefault("builds", set()).add(build)
            site["through"] = site.get("through", False) or build != (str(q.module.path), span(outer))
            padded, maybe = hooks.counts(value, handed)
            if padded and not path:
                site.setdefault("modes", []).append(member.name)
                site.setdefault("sources", []).extend(padded)
                if subject is not None and any(x.origin not in ("", subject) for x in padded):
                    site["another_batch"] = True  # padded for one batch, handed to the build of another
            elif padded or maybe:
                site.setdefault("why", []).extend(
                    [*(f"depends on {d}" for d in doubts(path)), *why_of(value)] or ["a value it could not evaluate"]
                )
    modeless = _modeless(q, scope)
    for site in sites.values():
        if site.get("modes") and not modeless:
            yield _finding(q, scope, site), frozenset(site["builds"]), site["through"]
        elif site.get("modes"):  # a padded count is right under a FULL graph, which only its callers can say
            why = "no CUDA-graph mode in scope: a padded count is right only where its caller replays a FULL graph"
            undecided = q.undecided("SG103", scope, site["node"], f"`{site['param']}=` of `{site['callee']}`", why)
            yield undecided, frozenset(site["builds"]), site["through"]
        elif site.get("why"):
            why = "; ".join(dict.fromkeys(site["why"]))[:300]
            undecided = q.undecided("SG103", scope, site["node"], f"`{site['param']}=` of `{site['callee']}`", why)
            yield undecided, frozenset(site["builds"]), site["through"]
    if budget and not any(s.get("modes") for s in sites.values()):
        yield q.out_of_budget("SG103", scope), frozenset(), False


def _runs_that_may_find(
    q: Question, scope: Scope, enum: ClassInfo, modes: list[EnumMember], all_modes: list[EnumMember]
) -> list[tuple[EnumMember, str | None]]:
    """The runs, one per mode and judged batch, that name the modes a padded count reaches a build in.

    A first run has every batch in any of `modes` at once: each test of a mode that one of them decides otherwise
    is forked freely, so a padded count that reaches a build in any one mode reaches it there too. Where none does
    (most functions) and there is one batch, nothing more is run. With several batches (several descriptors),
    each is judged in a run of its own with the others in any mode, and only a batch whose run finds a padded
    count is run again once per mode."""
    if len(modes) < 2:
        return [(member, None) for member in modes]
    first, ran = _in_any_of(q, scope, enum, modes, all_modes, None)
    subjects: list[str | None] = sorted(first.origins) if len(first.origins) > 1 else [None]
    runs: list[tuple[EnumMember, str | None]] = []
    for subject in subjects:
        hooks, ran = (first, ran) if subject is None else _in_any_of(q, scope, enum, modes, all_modes, subject)
        found = any(any(hooks.counts(site[4], site[8])) for site in hooks.sites)
        if found or not ran:
            runs += [(member, subject) for member in modes]
    return runs


def _in_any_of(
    q: Question,
    scope: Scope,
    enum: ClassInfo,
    modes: list[EnumMember],
    all_modes: list[EnumMember],
    subject: str | None,
) -> tuple[_Counts, bool]:
    """One run with the judged batch (every batch, for None) in any of `modes`: its hooks, and whether it ended
    within its budget."""
    mode = OneOf(tuple(modes), frozenset({Label(MODE, "|".join(m.name for m in modes))}))
    hooks = _Counts(q, mode, enum, subject=subject, modes=tuple(all_modes))
    return hooks, _ran(q, scope, hooks)


def _ran(q: Question, scope: Scope, hooks: _Counts) -> bool:
    """Run the function with its parameters as the pack says they are; False: out of budget."""
    hooks.scope_node = scope.node
    try:
        q.evaluator(hooks).run(
            scope.function, bind_parameters(scope.function, q.self_value(scope), hooks.entry_parameter, q.program)
        )
    except (OutOfBudget, RecursionError):
        return False
    return True


def _finding(q: Question, scope: Scope, site: dict[str, Any]) -> Judgement:
    pad = q.pack.padding
    source: Label = nearest(site["sources"])
    arg: Passed | None = site["arg"]
    if arg is None:
        passed = f"`{site['param']}` (through `{_call_text(site['node'])}`)"
    else:
        passed = {
            "": f"`{site['param']}=`" if arg.keyword else f"`{site['param']}` (by position)",
            "*": f"`{site['param']}` (unpacked with `*`)",
            "**": f"`{site['param']}` (unpacked with `**`)",
        }[arg.star]
    where = f" ({place_text(source.path, source.span[0], q.path)})" if source.span is not None else ""
    modes = " and ".join(dict.fromkeys(site["modes"]))
    message = (
        f"`{scope.qualname}` passes `{source.text}`{where}, a padded token count, as {passed} to `{site['callee']}` "
        + (
            f"when the batch it builds for runs in {modes} mode (the count was padded for another batch)"
            if site.get("another_batch")
            else f"when the batch's CUDA-graph mode is {modes}"
        )
        + f"; outside `{pad.mode_attribute} == {pad.full_mode}` it must be "
        f"the real query token count (`query_start_loc[-1]`)"
        + (f"; it gets there {source.how()}" if source.steps else "")
    )
    details = {"param": site["param"]}
    if arg is not None:
        details["star"] = arg.star
        details["keyword"] = arg.keyword or ""
        details["call_span"] = ",".join(map(str, span(site["call"])))
        real = _query_count(q, scope, site["call"], site["to"])
        details.update(no_real=real.reason) if isinstance(real, NoFix) else details.update(real=real)
    if source.span is not None and source.path == q.path:
        details["source_span"] = ",".join(map(str, source.span))
    if site.get("another_batch"):
        details["no_real"] = "the count was padded for another batch than the one the build is handed"
        details.pop("real", None)
    return q.judgement("SG103", scope, site["node"], message, **details)


def _query_count(q: Question, scope: Scope, call: ast.Call, target: Callee) -> str | NoFix:
    """The real token count of the query `call` builds metadata for, read off its arguments with what the
    project says about the function it reaches (its parameters and defaults, the overrides it passes through)."""
    pad = q.pack.padding
    names = QueryNames(tuple(pad.query_offsets), tuple(pad.query_requests), tuple(pad.query_width))
    function = target.function
    reached = Reached(None, None)
    if function is not None and not isinstance(function.node, ast.Lambda):
        reached = Reached(function.qualname, signature(function.node, target.bound))
    classes = cached_on(q.module.tree, "top_classes", _top_classes)  # not rebuilt for every call site
    caller_self = scope.node.args.args[0].arg if scope.bound and scope.node.args.args else None
    bases = frozenset(q.pack.speculators.bases)

    def lookup(key: str) -> Reached:  # "super(Cls).method": the definition above Cls
        match = re.fullmatch(r"super\((.+)\)\.(\w+)", key)
        cls = q.module.classes.get(match.group(1)) if match else None
        if match is None or cls is None:
            return Reached(None, None)
        for klass in q.program.ancestors(cls)[1:]:
            if match.group(2) in klass.methods:
                node = klass.methods[match.group(2)]
                return Reached(f"{klass.name}.{node.name}", signature(node, not has_decorator(node, "staticmethod")))
        return Reached(None, None)

    return real_count(
        call, reached, names, caller_self=caller_self, bases=bases, classes=classes, lookup=lookup, caller=scope.node
    )


def _top_classes(tree: ast.AST) -> dict[str, ast.ClassDef]:
    return {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}  # type: ignore[attr-defined]


def _call_text(node: ast.AST) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    text = ast.unparse(target)
    return (text if len(text) <= 50 else text[:47] + "...") + "(...)"


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    for judgement in ctx.facts.judgements:
        if judgement.code != "SG103" or not judgement.decided:
            continue
        fix = _fix(ctx, judgement)
        message = judgement.message + (f"; no fix offered: {fix.reason}" if isinstance(fix, NoFix) else "")
        yield Diagnostic(None, message, judgement.scope, judgement.span, fix=fix if isinstance(fix, NodeFix) else None)


def _fix(ctx: RuleContext, judgement: Judgement) -> NodeFix | NoFix:
    """The fix for a judged site, from what the judge wrote down: where the argument, its call and the padded
    count's read are, and the real count of the call's query (or why there is none)."""
    function = ctx.function_at(judgement)
    node = ctx.node_at(judgement.span)
    call = ctx.node_at(_span(judgement.detail("call_span")))
    star = judgement.detail("star")
    if star is None or function is None or node is None or not isinstance(call, ast.Call):
        return NoFix("the count reaches the build through another call, with no argument here to rewrite")
    arg = Passed(node, judgement.detail("keyword") or None, star)
    real = judgement.detail("real")
    count = real if real is not None else NoFix(judgement.detail("no_real") or "its query's count is not known")
    return full_or_real_fix(ctx, function, call, arg, _span(judgement.detail("source_span")), count)


def _span(text: str | None) -> tuple[int, int, int, int] | None:
    return tuple(map(int, text.split(","))) if text else None  # type: ignore[return-value]


# ---- the fix: the padded count under FULL graphs, the real count of the call's query otherwise ---------------


def full_or_real_fix(
    ctx: RuleContext,
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    call: ast.Call,
    arg: Passed,
    read_at: tuple[int, int, int, int] | None,
    real: str | NoFix,
) -> NodeFix | NoFix:
    """Rewrite the argument to `<padded> if <descriptor>.cg_mode == CUDAGraphMode.FULL else <real count>`, what
    upstream's shared helper decides, where the descriptor the padded count was read from (at `read_at`) is in
    scope and the real count of the query this call describes follows from its arguments (`real`, found by the
    judge with the project in view: fixes/query_count.py)."""
    pad = ctx.pack.padding
    if not (pad.mode_attribute and pad.full_mode and pad.mode_enum):
        return NoFix("the rule pack names no CUDA-graph mode to test (`[padding] mode_enum`)")
    if arg.star:
        return NoFix(f"the count reaches the call inside `{arg.star}` arguments, with nothing to rewrite in place")
    reads = (n for n in walked(function) if isinstance(n, ast.Attribute) and n.attr == pad.padded_attribute)
    read = next((n for n in reads if span(n) == read_at), None)
    descriptor = dotted(read.value) if read is not None else None
    if read is None or descriptor is None:
        return NoFix("the padded count is read in another function, so the descriptor that decides is not in scope")
    if _rebound(function, descriptor, read, call):
        return NoFix(f"`{descriptor}` is assigned again between the read of its count and the call")
    if isinstance(real, NoFix):
        return real
    enum = _mode_enum(ctx, pad.mode_enum)
    if enum is None:
        return NoFix(f"`{pad.mode_enum.rpartition('.')[2]}` means something else in this module")
    value = arg.node.value if isinstance(arg.node, ast.keyword) else arg.node
    written = source_segment(ctx.text, value) if isinstance(value, ast.expr) else None
    padded = flat(written) if written is not None else None
    if padded is None or not isinstance(value, ast.expr):
        return NoFix("the padded argument spans lines with a comment, which a fix cannot move")
    if isinstance(value, (ast.IfExp, ast.Lambda, ast.NamedExpr)):
        padded = f"({padded})"
    name, import_edit = enum
    parts = [padded, f"if {descriptor}.{pad.mode_attribute} == {name}.{pad.full_mode}", f"else {real}"]
    statement = enclosing_statement(function, value)
    layout = Layout(ctx.facts.line_length, indent_unit(ctx.text, function))
    edit = place(ctx.text, value, layout, ("(", parts, ")", " ".join(parts)), statement, call) if statement else None
    if edit is None:
        return NoFix("the rewritten argument cannot be laid out within the line length where it stands")
    return NodeFix(
        "unsafe",
        f"Pass `{padded}` only under FULL CUDA graphs and the real count of the call's query, `{real}`, otherwise",
        (),
        (edit, *import_edit),
    )


def _rebound(function: ast.FunctionDef | ast.AsyncFunctionDef, descriptor: str, read: ast.AST, call: ast.Call) -> bool:
    """Whether the descriptor (`d`, `self.desc`) or what holds it is assigned after the read and before the call
    ends: the mode tested at the call would then be another descriptor's."""
    start, end = (read.lineno, read.col_offset), (call.end_lineno or call.lineno, call.end_col_offset or 0)  # type: ignore[attr-defined]
    holders = {".".join(descriptor.split(".")[:i]) for i in range(1, descriptor.count(".") + 2)}
    stores = (n for n in walked(function) if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Store))
    return any(dotted(n) in holders and start < (n.lineno, n.col_offset) < end for n in stores)


def _mode_enum(ctx: RuleContext, qualified: str) -> tuple[str, tuple[Edit, ...]] | None:
    """The local name of the mode enum, and the import that binds it where the module has none."""
    module, _, name = qualified.rpartition(".")
    for local, target in ctx.facts.imports:
        if target == qualified or target.rpartition(".")[2] == name:  # also re-exported, or imported as another name
            return local, ()
    if name in ctx.facts.local_names or any(local == name for local, _ in ctx.facts.imports):
        return None  # the name means something else here
    return name, (add_import(ctx.source, module, name),)


RULE = Rule(
    code="SG103",
    name="padded-token-count",
    title="padded token count reaches the metadata builder outside FULL CUDA graphs",
    summary=(
        "Flags a metadata build (a call of the sink `build_attn_metadata` or of a speculator's shared metadata "
        "helper) whose token-count argument (`num_tokens`, `num_tokens_padded`) is a padded count on a path where "
        "the batch's CUDA-graph mode is NONE or PIECEWISE. Padded counts are the pack's sources: a "
        "batch-execution descriptor's `num_tokens`, an input batch's `num_tokens_after_padding`, the DP-synced "
        "per-rank counts and their maximum, CUDA-graph capture sizes, and what is derived from them. Builds in "
        "speculators are judged against their descriptor's mode; a function of any other class that is handed "
        "its batch's mode (a parameter annotated `CUDAGraphMode`, as a model state's `prepare_attn` is) is "
        "judged against that mode, as one handed a batch-execution descriptor is against the descriptor's."
    ),
    why=(
        "With data parallelism the descriptor's token count includes DP padding that no request owns, while "
        "`query_start_loc` counts real tokens. Only a FULL CUDA graph replays the padded shape; in eager or "
        "PIECEWISE mode FlashInfer refuses the launch (`q.shape[0] (52) does not match qo_indptr[-1] (48)`), "
        "which is how DFlash failed to start with DP>1."
    ),
    analysis=(
        "The rule judges what the code computes, not how it is spelled. Each speculator function that builds "
        "metadata (directly or through a helper of its module) is evaluated once with the batch's mode fixed to "
        "each runtime mode but FULL (NONE, PIECEWISE), along every path: the mode is the descriptor's `cg_mode`, "
        "a parameter annotated with the mode enum, or a helper's result annotated so, and every test on it is "
        "evaluated: `==`/`is`/`in`, a local bool, `if`/`elif`/`else`, `match`, an early `return`/`raise`, "
        "`assert`, and the enum's own methods (`has_full_cudagraphs()`, `__bool__`, `.value`), read from the "
        "analyzed source (where the enum's module cannot be found, an enum of the pack's runtime modes stands in, "
        "without methods). A finding is a path where the token-count argument is a padded count. The mode belongs "
        "to a descriptor, not to the process: where a function holds several (a prefill's and a decode's, one "
        "another method stored on `self`, one a CUDA-graph manager's `dispatch` returned, one read from a mapping "
        "of descriptors by a constant key), each is a batch of its own, judged in each mode but FULL while the "
        "others run in any mode, and a count padded for any of them that reaches a build handed that batch is a "
        "finding (a guard that tests another batch's mode does not protect it). A mode read elsewhere (the "
        "compilation config's, through a parameter annotated with its class) is a setting of the process, any "
        "member in any batch: a guard on it does not protect either.",
        "Padded values stay padded through assignments, tuple unpacking, the walrus, arithmetic, `max`/`sum` (and"
        " a tensor's `.max()`/`.item()`), slicing and the length of a buffer sliced by them, containers, "
        "comprehensions, dicts and `**kwargs`, `functools.partial`, dataclass fields and `dataclasses.replace`, "
        "and instance attributes (what any method of the class writes into `self.<attr>`). `min` with another "
        "count may give that count, so it is not decided; `min` with a capacity (`[padding] capacities`, such as "
        "`self.max_num_tokens`) or a number is still padded. Padded is a meaning, not a name: a count rounded up "
        "to a multiple, and a size chosen for being at least the count (`next(s for s in sizes if s >= n)`, the "
        "next captured graph size), are padded whatever they are called. Calls of the project's functions are "
        "followed into "
        f"the callee with the caller's values, {MAX_DEPTH} calls deep: methods of the class and its bases, "
        "`super()`, explicit base calls (`Base.helper(self, ...)`), static and class methods, methods of objects "
        "the class builds, bound-method aliases and module functions of any module; a padded count passed to a "
        "helper that builds metadata is reported at the call into the helper.",
        "Unknown stays unknown: a padded count that reaches the build only through a call the evaluation cannot "
        "read, or a test on the mode it cannot decide (a method of an object it cannot see, an evaluation "
        "budget), is not a finding; such sites are counted (`--statistics`) and listed with the reason (`-v`).",
    ),
    bad="""
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def _padded(self, batch_desc):
                return batch_desc.num_tokens

            def propose(self, num_reqs, num_tokens):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                n = self._padded(batch_desc)  # a helper's return value
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # SG103

            def propose_step(self, num_reqs, batch_desc):
                kwargs = dict(num_reqs=num_reqs, num_tokens_padded=max(num_reqs, batch_desc.num_tokens))
                return self._build_draft_attn_metadata(**kwargs, step=1)  # SG103: through **kwargs

            def propose_graphed(self, num_reqs, batch_desc, batch):
                graphed = batch_desc.cg_mode != CUDAGraphMode.NONE  # PIECEWISE is graphed, and not FULL
                n = batch_desc.num_tokens if graphed else int(batch.query_start_loc_np[num_reqs])
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=n,  # SG103
                    query_start_loc_np=batch.query_start_loc_np,
                )

            def propose_block(self, num_reqs, batch):
                d, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, batch.num_tokens)
                if d.cg_mode in (CUDAGraphMode.NONE,):  # eager only: PIECEWISE falls through
                    return None
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=d.num_tokens,  # SG103
                    query_start_loc_np=batch.query_start_loc_np,
                )

            def propose_decode(self, num_reqs, prefill: BatchExecutionDescriptor, decode: BatchExecutionDescriptor):
                # the prefill's mode guards a count handed to the decode's build
                n = prefill.num_tokens if prefill.cg_mode == CUDAGraphMode.FULL else num_reqs
                return self._build_draft_attn_metadata(
                    batch_desc=decode,
                    num_reqs=num_reqs,
                    num_tokens_padded=n,  # SG103
                )

            def propose_capped(self, num_reqs, batch_desc, batch):
                n = min(batch_desc.num_tokens, self.max_num_tokens)  # a capacity is not the real count
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=n,  # SG103
                    query_start_loc_np=batch.query_start_loc_np,
                )
    """,
    good="""
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def _count(self, batch_desc, query_start_loc_np):
                if batch_desc.cg_mode == CUDAGraphMode.FULL:
                    return batch_desc.num_tokens
                return int(query_start_loc_np[-1])

            def propose(self, num_reqs, num_tokens, query_start_loc_np):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                n = self._count(batch_desc, query_start_loc_np)  # a helper that decides by mode
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)

            def propose_step(self, num_reqs, batch_desc, query_start_loc_np):
                full = batch_desc.cg_mode is CUDAGraphMode.FULL  # a local bool
                kwargs = dict(num_reqs=num_reqs, num_tokens_padded=int(query_start_loc_np[-1]))
                if full:
                    kwargs["num_tokens_padded"] = batch_desc.num_tokens
                return self._build_draft_attn_metadata(**kwargs, step=1)

            def propose_graphed(self, num_reqs, batch_desc, num_query_tokens):
                if batch_desc.cg_mode in (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE):  # an early return
                    return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=num_query_tokens)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)

            def propose_block(self, num_reqs, batch_desc, query_start_loc_np):
                match batch_desc.cg_mode:
                    case CUDAGraphMode.FULL:
                        n = batch_desc.num_tokens
                    case _:
                        n = int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n, step=1)

            def replay(self, num_reqs, batch_desc):
                assert batch_desc.cg_mode == CUDAGraphMode.FULL, "replay needs a FULL CUDA graph"
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)

            def propose_decode(self, num_reqs, prefill: BatchExecutionDescriptor, decode: BatchExecutionDescriptor):
                n = decode.num_tokens if decode.cg_mode == CUDAGraphMode.FULL else num_reqs  # the decode's own mode
                return self._build_draft_attn_metadata(batch_desc=decode, num_reqs=num_reqs, num_tokens_padded=n)

            def propose_capped(self, num_reqs, num_query_tokens):
                n = min(num_query_tokens, self.max_num_tokens)  # the real count, capped
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
    """,
    check=check,
    applies=_calls_the_sink,
    judge=judge,
    limits=(
        Limit(
            "Values stored on objects other than `self` are not followed: an instance attribute holds what the "
            "class's methods write into `self.<attr>`, not what they write into an object it holds.",
            missed="""
                from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
                from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

                class MyDraftSpeculator(DraftModelSpeculator):
                    def prepare(self, num_reqs, num_tokens):
                        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                        self.state.padded = batch_desc.num_tokens

                    def propose(self, num_reqs):
                        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.state.padded)
            """,
        ),
        Limit(
            f"Calls are followed {MAX_DEPTH} deep: a padded count that reaches the build through a longer chain of "
            "helpers is an unknown, and the site is counted as not decided (`--statistics`, `-v`).",
            missed="""
                from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
                from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

                def tokens(d):
                    return _tokens(d)

                def _tokens(d):
                    return __tokens(d)

                def __tokens(d):
                    return ___tokens(d)

                def ___tokens(d):
                    return ____tokens(d)

                def ____tokens(d):
                    return d.num_tokens

                class MyDraftSpeculator(DraftModelSpeculator):
                    def propose(self, num_reqs, num_tokens):
                        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=tokens(batch_desc))
            """,
        ),
        Limit(
            "An argument passed by position is matched to a parameter only where the project holds the callee's "
            "definition (the speculator base, in the analyzed tree or installed); otherwise only keywords are read.",
            missed="""
                from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
                from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

                class MyDraftSpeculator(DraftModelSpeculator):
                    def propose(self, num_reqs, num_tokens):
                        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                        return self._build_draft_attn_metadata(num_reqs, batch_desc.num_tokens)
            """,
        ),
        Limit(
            "A value chosen by a test on a padded count, or counted by a loop over one, is not a padded value "
            "(influence through control is not followed).",
            missed="""
                from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
                from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

                class MyDraftSpeculator(DraftModelSpeculator):
                    def propose(self, num_reqs, num_tokens):
                        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                        n = 0
                        for _ in range(batch_desc.num_tokens):
                            n += 1
                        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
            """,
        ),
    ),
    references=(
        'vllm-project/vllm#56181 ("Fix DP token padding in dflash attention metadata", in vLLM 0.30.0): the shared '
        "helper `DraftModelSpeculator._build_attn_metadata` takes the descriptor's count for FULL CUDA graphs and "
        "`query_start_loc_np[-1]` otherwise; DFlash's `q.shape[0] (52) does not match qo_indptr[-1] (48)` at "
        "startup with DP>1 is the failure it fixed.",
        'vllm-project/vllm#55458 ("Exclude DP token padding from draft attention metadata"): the same DP '
        "padding, fixed first in the autoregressive draft decode.",
    ),
    fix_availability="sometimes",
    fix_summary=(
        "Unsafe: the argument becomes `<padded> if <descriptor>.cg_mode == CUDAGraphMode.FULL else <real count>`,"
        " the choice upstream's shared helper makes, and `CUDAGraphMode` is imported where the module lacks it. "
        "The real count is that of the query this very call builds metadata for, read off the call's own "
        "arguments as the pack describes them (`[padding] query_offsets`, `query_requests`, `query_width`): "
        "`int(<offsets>[<num_reqs>])` when the call hands the build its query start offsets, else `<num_reqs> * "
        "<num_query_per_req>` for the uniform query the helper builds, the width's default read from the helper's"
        " definition, and an override in the same module that only checks its arguments and forwards them to "
        "`super()` followed through that call. A count found elsewhere in the function is never taken: a draft "
        "decode step that sees the target batch's offsets builds one token per request. Offered only where the "
        "descriptor the padded count was read from is in scope at the call and that count follows; otherwise the "
        "finding keeps no fix and its message says why (a count from a helper or through `**kwargs`, a call that "
        "does not say its query, an override in another module). It is unsafe because what the helper builds from"
        " its arguments is the pack's description of it, a subclass elsewhere may override the helper again, and "
        "eager/PIECEWISE builds whose count carried graph or DP padding change, which is the point of the fix; "
        "the better fix, moving to the shared helper that decides, needs a person."
    ),
    fixed="""
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def _padded(self, batch_desc):
                return batch_desc.num_tokens

            def propose(self, num_reqs, num_tokens):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                n = self._padded(batch_desc)  # a helper's return value
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # SG103

            def propose_step(self, num_reqs, batch_desc):
                kwargs = dict(num_reqs=num_reqs, num_tokens_padded=max(num_reqs, batch_desc.num_tokens))
                return self._build_draft_attn_metadata(**kwargs, step=1)  # SG103: through **kwargs

            def propose_graphed(self, num_reqs, batch_desc, batch):
                graphed = batch_desc.cg_mode != CUDAGraphMode.NONE  # PIECEWISE is graphed, and not FULL
                n = batch_desc.num_tokens if graphed else int(batch.query_start_loc_np[num_reqs])
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=(
                        n
                        if batch_desc.cg_mode == CUDAGraphMode.FULL
                        else int(batch.query_start_loc_np[num_reqs])
                    ),  # SG103
                    query_start_loc_np=batch.query_start_loc_np,
                )

            def propose_block(self, num_reqs, batch):
                d, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, batch.num_tokens)
                if d.cg_mode in (CUDAGraphMode.NONE,):  # eager only: PIECEWISE falls through
                    return None
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=(
                        d.num_tokens
                        if d.cg_mode == CUDAGraphMode.FULL
                        else int(batch.query_start_loc_np[num_reqs])
                    ),  # SG103
                    query_start_loc_np=batch.query_start_loc_np,
                )

            def propose_decode(self, num_reqs, prefill: BatchExecutionDescriptor, decode: BatchExecutionDescriptor):
                # the prefill's mode guards a count handed to the decode's build
                n = prefill.num_tokens if prefill.cg_mode == CUDAGraphMode.FULL else num_reqs
                return self._build_draft_attn_metadata(
                    batch_desc=decode,
                    num_reqs=num_reqs,
                    num_tokens_padded=n,  # SG103
                )

            def propose_capped(self, num_reqs, batch_desc, batch):
                n = min(batch_desc.num_tokens, self.max_num_tokens)  # a capacity is not the real count
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=(
                        n
                        if batch_desc.cg_mode == CUDAGraphMode.FULL
                        else int(batch.query_start_loc_np[num_reqs])
                    ),  # SG103
                    query_start_loc_np=batch.query_start_loc_np,
                )
    """,
)
