"""SG106 plan-before-padding: a batch's attention metadata is planned, the batch is padded, and its forward does
not plan again."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NamedTuple

from specguard.evaluation.choices import Choices, each_path
from specguard.evaluation.hooks import Hooks
from specguard.evaluation.instances import writers
from specguard.evaluation.objects import field_default
from specguard.evaluation.paths import Frame, State, doubts
from specguard.evaluation.values import (
    NOT_HANDLED,
    STAR_KWARGS,
    UNKNOWN,
    Bound,
    ClassRef,
    EnumMember,
    Function,
    Label,
    Method,
    Obj,
    OneOf,
    Opaque,
    Partial,
    Sym,
    Tagged,
    answer_key,
    labels_of,
    maybe_of,
    place_text,
    plain,
    same_value,
)
from specguard.findings import Judgement
from specguard.packs import Pack
from specguard.program.ast_tools import annotation_names, cached_on, dotted, has_decorator, last_name, span, walked
from specguard.program.tree import ClassInfo
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext, report_judgements
from specguard.rules.judging import (
    MAX_DEPTH,
    OutOfBudget,
    Question,
    Scope,
    annotated_own_class,
    called_as,
    constructor_refuses,
    definition_text,
    held_classes,
    held_instance,
    is_batch_class,
    own_module,
    self_calls,
    unknown_parameter,
    words,
    writes_of,
)

# The batch the rule evaluates: this many requests when planned, one more once padded. Concrete counts, so that a
# predicate comparing the batch's shapes with the ones recorded at the plan decides.
REAL_COUNT, PADDED_COUNT = 3, 4
DP_SIZE = 2  # the DP attention ranks where the evaluation runs with DP attention on
# Fields of a batch the evaluation keeps, each a value whose label says what happened to the batch: the plan (the
# count it was for, where), the pad (what padded it). A label survives where paths that did and did not plan meet
# (as a `maybe` label), so each path's forward reads what happened on it or on some path to it.
PLANNED, PADDED = "<sg106 planned>", "<sg106 padded>"
# ... and what its own methods did (`mark_forward_metadata_ready()` under a test): the fields they write are read
# path by path where a test decides whether one ran
CALLED = "<sg106 called>"
PADDED_BY_FORWARD = "the forward's own padding for DP attention"


class Event(NamedTuple):
    """A forward of a batch planned for fewer requests than it runs, that its predicate lets run unplanned."""

    forward: ast.AST  # the call in the judged function that reaches the forward (or the forward itself)
    plan: Label  # the count it was planned for, where
    pad: str  # what padded it: a call, or the forward's own DP padding
    path: frozenset
    model: bool = False  # the model itself runs it (which never plans), not a forward that may plan again
    skipped: bool = False  # the forward was told not to plan (`skip_attn_backend_init=True`)


def _happened(state: State, batch: Obj, what: str) -> frozenset[Label]:
    """What happened to the batch on this path, or on some of the paths that met on the way to it (to the batch it
    was copied from too: `dataclasses.replace(batch, ...)` carries what the batch had)."""
    value = state.writes.get((id(batch), what), batch.fields.get(what))
    if value is None:
        return frozenset()
    return frozenset(label for label in labels_of(value) | maybe_of(value) if label.kind == what)


def _first(plans: frozenset[Label]) -> Label:
    """The plan a message names where several paths planned the batch alike: the first in the source."""
    return min(plans, key=lambda label: (label.path, label.span or (0, 0, 0, 0)))


def _same_shape(then: tuple[Any, Any], now: tuple[Any, Any]) -> bool:
    """Whether the batch has the count and tokens a plan was made for: the same values, or both known and equal."""
    return all(a is b or same_value(a, b) for a, b in zip(then, now, strict=True))


def _owned_as(func: Any, paths: set[tuple[str, ...]]) -> bool:
    """Whether the call reaches a method of the tree named as `Class.method` in these (`EagerRunner.execute`,
    through a subclass's `self.execute(...)`), by the class that defines it."""
    func = plain(func)
    target = func.func if isinstance(func, Bound) else func
    if not isinstance(target, Function) or target.owner is None:
        return False
    return (target.owner.name, target.name) in paths


class _Forwards:
    """Forwards as the pack names them: by their last name (`forward`), by the end of their dotted name
    (`eager_runner.execute`), or by the class that defines them (`EagerRunner.execute`)."""

    def __init__(self, names: list[str]) -> None:
        self.names = {name for name in names if "." not in name}
        self.paths = {tuple(name.split(".")) for name in names if "." in name}

    def match(self, name: str | None, node: ast.Call, func: Any) -> bool:
        return name in self.names or called_as(node, self.paths) is not None or _owned_as(func, self.paths)

    def match_receiver(self, name: str | None, node: ast.Call, func: Any, held: Callable[[str], list[str]]) -> bool:
        """`match`, or by the class of the object it is called on where the judged instance holds that as a parameter
        of a declared class (`self.target_runner = runner`, `runner: ModelRunner`), or by the last name of one of
        these where that object's class is not known (`runner.forward(batch)`: taken for the framework's forward,
        as the pack's `forwards` take a call of that name)."""
        if self.match(name, node, func):
            return True
        inner = plain(func)
        if not isinstance(inner, Method):
            return False
        receiver = plain(inner.receiver)
        if isinstance(receiver, Sym) and receiver.name.count(".") == 1:
            owner, _, attr = receiver.name.partition(".")
            classes = held(attr) if owner == "self" else []
            if classes:
                return any((klass, inner.name) in self.paths for klass in classes)
        return inner.name in {path[-1] for path in self.paths}


def _name(func: Any) -> str | None:
    """The name a call reaches, whatever it was reached through (a bound method, a partial, a method of an object
    the evaluation cannot see into)."""
    func = plain(func)
    while isinstance(func, Partial):
        func = plain(func.func)
    if isinstance(func, Bound):
        return func.func.name
    if isinstance(func, (Function, Method)):
        return func.name
    if isinstance(func, (Sym, Opaque)):  # a member of an object the evaluation cannot see into, or a function of a
        # library it does not read (the framework, where the tree checked does not include it)
        return func.name.rpartition(".")[2] or None
    return None


def _inherited(func: Any) -> bool:
    """A method called on an object of a subclass of the class that defines it."""
    func = plain(func)
    if not isinstance(func, Bound) or func.func.owner is None:
        return False
    receiver = plain(func.self_value)
    return isinstance(receiver, Obj) and receiver.cls is not None and receiver.cls != func.func.owner


def _not_alone(func: Any, args: list[Any], kwargs: dict[str, Any]) -> bool:
    """A call whose callee is not judged on its own as this call runs it, so what happens inside is the judged
    function's: a closure or a lambda (no scope of its own: `compose(*steps)(state)`), or a function handed the
    functions it calls (`run_steps(state, plan, mark, forward)`, a list of steps)."""
    inner = plain(func)
    inner = inner.func if isinstance(inner, Bound) else inner
    if isinstance(inner, Function) and (inner.closure is not None or isinstance(inner.node, ast.Lambda)):
        return True
    return any(_callables(value) for value in [*args, *kwargs.values()])


def _callables(value: Any, depth: int = 2) -> bool:
    """A function, a partial or a bound method, or a list, tuple or dict of them (a few levels down)."""
    value = plain(value)
    if isinstance(value, (Function, Partial, Bound)):
        return True
    if depth and isinstance(value, (list, tuple)):
        return any(_callables(v, depth - 1) for v in value)
    if depth and isinstance(value, dict):
        return any(_callables(v, depth - 1) for v in value.values())
    return False


def _bound_methods(value: Any) -> bool:
    """A bound method, or one of a few: each judged on its own where it is defined."""
    value = plain(value)
    options = value.options if isinstance(value, OneOf) else (value,)
    return all(isinstance(plain(option), Bound) for option in options)


def _known(value: Any) -> bool:
    return isinstance(value, (bool, int, type(None)))


def _receiver(func: Any) -> Any:
    func = plain(func)
    if isinstance(func, Bound):
        return plain(func.self_value)
    if isinstance(func, Method):
        return plain(func.receiver)
    return None


class _Batches(Hooks):
    """One evaluation of a function with DP attention on: plans, pads and forwards of batch objects."""

    through_partials = True  # a forward reached through a partial is judged with the keywords it bound

    def __init__(self, q: Question, fields: frozenset[str]) -> None:
        self.q, names = q, q.pack.batches
        self.fields = fields  # what the batch's predicate reads: a batch handed in is not marked yet
        self.plan, self.pads, self.pad_calls = set(names.plan), set(names.pad_methods), set(names.pad_calls)
        self.forwards, self.after_padding = _Forwards(names.forwards), _Forwards(names.forwards_after_padding)
        self.dp_tests, self.types = set(names.dp_tests), set(names.batch_types)
        self.dp_sizes = set(names.dp_sizes)
        self.count, self.predicate = names.count_field or "", names.replan_predicate or ""
        self.dp_field, self.tokens = names.dp_field or "", names.token_field or ""
        self.model_forwards = {tuple(name.split(".")) for name in names.model_forwards}
        self.skip_keywords = list(names.skip_keywords)
        self.replan_keywords = list(names.replan_keywords)
        self.replan_when = [tuple(test.split(".")) for test in names.replan_when]
        self.always_when = [tuple(test.split(".")) for test in names.replan_always_when]
        self.always_forwards = _Forwards(names.replan_always_forwards)
        self.always_planned: set[Label] = set()  # plans made where one of `replan_always_when` held
        self.owner: ClassInfo | None = None  # the judged instance's class (its held objects' declared classes)
        self.shapes: dict[Label, tuple[Any, Any]] = {}  # each plan -> the batch's count and tokens it was made for
        self.events: list[Event] = []
        self.undecided: list[tuple[ast.AST, str]] = []
        # calls of the judged function whose callee is decided here: a method its `self` inherits (run with this
        # class's overrides; judged alone, with its own class's) or a callable held in a local (a `partial` a
        # factory returned): what happens inside is judged here, where the batch is handed to it
        self.decided_here: set[int] = set()
        self.decorated = False  # whether the judged function ran as its own decorators wrap it (`_run_decorated`)
        self.local_annotations: frozenset[int] = frozenset()  # see `_own_object`
        # plans of a batch whose count code before them computed and the evaluation could not (a join of paths, an
        # alignment the pack does not name): planned for REAL_COUNT by assumption, so a forward of another shape
        # is not decided by them
        self.assumed: set[Label] = set()
        # the batches planned and those run by a forward, by identity: a batch planned that no forward runs while
        # another one is run may be one the join of two paths lost (`fb = ForwardBatch.init_new(...)` planned on
        # one side, the parameter on the other, joined into a third object), so its paths are taken one by one
        self.planned: set[int] = set()
        self.forwarded: set[int] = set()
        # whether a forward was handed, under a batch's name, a value that is no batch the evaluation holds (a batch
        # lost where paths met: the one a test's side planned and the one its other side read)
        self.blind_forward = False
        self.batch_names = frozenset(q.pack.batches.batch_params)
        self.held: dict[str, Obj] = {}  # the objects of its own package's classes the instance keeps, one each

    def is_batch(self, value: Any) -> bool:
        value = plain(value)
        if not isinstance(value, Obj):
            return False
        if value.label == "batch":
            return True
        return value.cls is not None and is_batch_class(self.q, value.cls)

    def lost_plan(self) -> bool:
        return bool(self.planned) and self.blind_forward or bool(self.forwarded) and not self.planned <= self.forwarded

    def batches_in(self, args: list[Any], kwargs: dict[str, Any]) -> list[Obj]:
        return [plain(v) for v in (*args, *kwargs.values()) if self.is_batch(v)]

    def call(
        self, ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame, state: State
    ) -> Any:
        held = isinstance(node.func, ast.Name) and node.func.id in state.locals
        if not ev.calls and (_inherited(func) or (held and not _bound_methods(func)) or _not_alone(func, args, kwargs)):
            # (a method of its own held in a local, `run = self._plain if ... else ...`, is judged on its own)
            self.decided_here.add(id(node))
        made = self._made_batch(ev, func, args, kwargs, state, frame.depth)
        if made is not None:
            return made
        name = _name(func)
        if name is None:
            return NOT_HANDLED
        if name in self.dp_tests:
            return True  # the question is about a batch synchronised across DP ranks
        if name in self.dp_sizes:
            return DP_SIZE
        if name in self.plan:
            for batch in self.batches_in(args, kwargs):
                count = ev.getattr(batch, self.count, state, frame.depth)
                assumed = not isinstance(plain(count), int)
                if assumed:  # a batch of unknown size: take one of REAL_COUNT requests
                    ev.store(batch, self.count, REAL_COUNT, state)
                    count = REAL_COUNT
                where = "" if ev.here == ev.home else self.q.program.relpath(ev.here)
                entry = repr(span(ev.calls[0] if ev.calls else node))  # the judged function's call that planned it
                label = Label(PLANNED, str(plain(count)), span(node), where, entry)
                if assumed:
                    self.assumed.add(label)
                self.shapes[label] = self._shape(ev, batch, state, frame.depth)
                self.planned.add(id(batch))
                if self.always_when and self._holds(ev, batch, node, frame, state, self.always_when) is True:
                    self.always_planned.add(label)
                ev.store(batch, PLANNED, Tagged(True, frozenset({label})), state)
            return UNKNOWN  # what the plan computes is not the question
        receiver = _receiver(func)
        if name in self.pads and self.is_batch(receiver):
            self._padded(ev, receiver, node, frame, state)
            return None
        if name in self.pad_calls:
            for batch in self.batches_in(args, kwargs):
                if self._synchronised(ev, batch, state, frame.depth):
                    self._padded(ev, batch, node, frame, state)
            return None
        if self._runs_model(node):
            for batch in self.batches_in(args, kwargs):
                self._model_forward(ev, batch, node, frame, state)
            return NOT_HANDLED
        if self.forwards.match(name, node, func):
            replans = any(plain(kwargs.get(keyword)) is True for keyword in self.replan_keywords)
            batches = self.batches_in(args, kwargs)
            if not batches and any(
                last_name(a) in self.batch_names for a in (*node.args, *(k.value for k in node.keywords))
            ):
                self.blind_forward = True  # handed what is named a batch, and no batch the evaluation holds
            if (
                self.always_forwards.match_receiver(name, node, func, self._held_classes)
                and batches
                and all(self._replanned_always(ev, batch, node, frame, state) for batch in batches)
            ):
                self.forwarded.update(id(batch) for batch in batches)
                return NOT_HANDLED  # a mode the forward plans again whatever it is told: it plans the batch it runs
            if replans and all(
                not self.replan_when or self._holds(ev, batch, node, frame, state, self.replan_when) is True
                for batch in batches
            ):
                self.forwarded.update(id(batch) for batch in batches)
                return NOT_HANDLED  # told to plan again, and it does for this batch: it plans the batch it runs
            told = [plain(kwargs[keyword]) for keyword in self.skip_keywords if keyword in kwargs]
            # True: told not to plan; None: not known here (a keyword set on some paths only), judged path by path
            skips = True if any(v is True for v in told) else None if any(not _known(v) for v in told) else False
            pads = not self.after_padding.match(name, node, func)
            for batch in batches:
                self._forward(ev, batch, node, frame, state, skips, pads)
            return NOT_HANDLED
        if isinstance(plain(func), Bound) and self.is_batch(receiver) and name != self.predicate:
            result = ev.call(func, args, kwargs, node, frame, state)  # the batch's own method, run as written
            ev.store(receiver, CALLED, Tagged(True, frozenset({Label(CALLED, name)})), state)
            return result
        return NOT_HANDLED

    def attribute(self, ev: Any, base: Any, attr: str, value: Any, node: ast.AST | None, state: State) -> Any:
        if attr in self.dp_tests:  # a flag that says DP attention is on (`get_parallel().attn_dp_enabled`)
            return True
        if attr in self.dp_sizes:  # its number of ranks (`get_parallel().attn_dp_size`)
            return DP_SIZE
        return NOT_HANDLED

    def instance_attribute(self, ev: Any, obj: Any, attr: str) -> Any:
        """A setting the judged instance keeps (`replan_equivalent=self._replan_after_pad`), or a planning helper it
        holds (see `_holds_planner`): what its writers store there, run as written, the constructor with what it
        passes its own helpers. Only those: the other objects it holds (its runners, its backends) stay what they
        were, names the rule reads calls by."""
        if obj.label != "self" or obj.cls is None:
            return NOT_HANDLED
        held = held_instance(self.q, obj.cls, attr)
        if held is not None:
            # an object of its own package's class, kept from its constructor's annotated parameter
            # (`self.strategy = strategy`): its methods run where the instance calls them, on one object
            return self.held.setdefault(attr, Obj(held, label=attr))
        setting = _settings_only(self.q, obj.cls, attr)
        # A name stored there may be a setting or a planning function (`self._plan = plan_and_mark`): either kept.
        planner = _holds_planner(self.q, obj.cls, attr)
        kept = None
        if setting or planner:
            kept = self.q.instance_attributes("SG106", constructed=True).value(obj.cls, attr, None, self._writes)
        if setting and _setting(kept):
            return kept
        if planner and isinstance(plain(kept), (Obj, Function, Partial, dict, list, tuple)):
            return kept
        # a component its constructor builds (`self.eager = EagerModelRunner(runner)`), where it is no planner
        # read as built: one object of that class, whose methods run where the instance calls them
        built = held_instance(self.q, obj.cls, attr, built=True)
        return self.held.setdefault(attr, Obj(built, label=attr)) if built is not None else NOT_HANDLED

    def _held_classes(self, attr: str) -> list[str]:
        """The names of the class, and of its bases, of what the judged instance holds as `self.<attr>`."""
        return _held_classes(self.q, self.owner, attr) if self.owner is not None else []

    def _writes(self, function: Function, me: Obj, writes: dict | None) -> list[tuple[Any, dict]]:
        return writes_of(self.q, _Batches(self.q, self.fields), function, me, unknown_parameter, writes, own_calls=True)

    def _runs_model(self, node: ast.Call) -> bool:
        """A call of the model itself (`model_runner.model.forward(...)`), which never plans."""
        return called_as(node, self.model_forwards) is not None

    def _shape(self, ev: Any, batch: Obj, state: State, depth: int) -> tuple[Any, Any]:
        count = plain(ev.getattr(batch, self.count, state, depth))
        tokens = plain(ev.getattr(batch, self.tokens, state, depth)) if self.tokens else None
        return count, tokens

    def _model_forward(self, ev: Any, batch: Obj, node: ast.Call, frame: Frame, state: State) -> None:
        """The model runs the batch as it is now, with the metadata of its latest plan: a pad since is one."""
        reached = self._planned_here(ev, batch, node, state)
        if reached is None:
            return
        at, plans = reached
        now = self._shape(ev, batch, state, frame.depth)
        if any(label not in self.shapes for label in plans):
            return  # planned where its shape could not be read
        if all(_same_shape(self.shapes[label], now) for label in plans):
            return  # it is as it was planned
        if any(_same_shape(self.shapes[label], now) for label in plans):
            # some of the paths that met here planned it as it is now, some not: read path by path
            self.undecided.append((at, "the paths that reach it planned the batch for different shapes"))
            return
        if plans & self.assumed:
            self.undecided.append((at, _ASSUMED))
            return
        pad = self._pad_said(batch, state) or "code after the plan"
        self.events.append(Event(at, _first(plans), pad, state.path, model=True))

    def _planned_here(self, ev: Any, batch: Obj, node: ast.Call, state: State) -> tuple[ast.AST, frozenset] | None:
        """The call of the judged function that reaches this forward, and the plans the batch had on the way; None
        where it had none, or where the plans and the forward all lie inside that one call (judged in the callee)."""
        self.forwarded.add(id(batch))
        plans = _happened(state, batch, PLANNED)
        at = ev.calls[0] if ev.calls else node
        inside = ev.calls and id(at) not in self.decided_here
        if not plans or (inside and all(label.origin == repr(span(at)) for label in plans)):
            return None
        return at, plans

    def _pad_said(self, batch: Obj, state: State) -> str | None:
        """What padded the batch since it was made, as a message says it: a pad method, or an assignment."""
        pads = _happened(state, batch, PADDED)
        if pads:
            return min(pads, key=lambda label: label.text).text
        written = batch.nodes.get(self.count) or (batch.nodes.get(self.tokens) if self.tokens else None)
        return f"the assignment at line {written.lineno}" if written is not None else None

    def _synchronised(self, ev: Any, batch: Obj, state: State, depth: int) -> bool:
        """Whether the batch may be synchronised across DP ranks (its DP field set, or not known to be unset): a
        runner pads only such a batch."""
        return not self.dp_field or plain(ev.getattr(batch, self.dp_field, state, depth)) is not None

    def _padded(self, ev: Any, batch: Obj, node: ast.Call, frame: Frame, state: State) -> None:
        """The batch padded by this call, which says so."""
        self._pad(ev, batch, state)
        what = f"`{ast.unparse(node)}` ({ev.place(frame, node)})"
        ev.store(batch, PADDED, Tagged(True, frozenset({Label(PADDED, what)})), state)

    def _pad(self, ev: Any, batch: Obj, state: State) -> None:
        ev.store(batch, self.count, PADDED_COUNT, state)
        if self.tokens:
            ev.store(batch, self.tokens, tokens(PADDED_COUNT), state)

    def _made_batch(
        self, ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], state: State, depth: int
    ) -> Obj | None:
        """A batch a call makes: the batch class called, or one of its classmethods (`ForwardBatch.init_new`). One
        built field by field (`ForwardBatch(forward_mode=..., batch_size=bs, ...)`, a warm-up's) is synchronised
        across DP ranks only where it is handed its per-rank counts: else its class's default (None) says not. One
        made from another batch (`ForwardBatch.init_new(batch, runner)`) takes its `copied_fields` (its mode)."""
        func = plain(func)
        made = func.info if isinstance(func, ClassRef) else None
        if isinstance(func, Bound) and isinstance(plain(func.self_value), ClassRef):
            made = plain(func.self_value).info
        if made is None or not is_batch_class(self.q, made):
            return None
        batch = fresh_batch(self.q, made)
        if isinstance(func, Bound) and args and plain(args[0]) is not None:
            for name in self.q.pack.batches.copied_fields:
                batch.fields[name] = ev.getattr(args[0], name, state, depth)
        built = isinstance(func, ClassRef) and not args and STAR_KWARGS not in kwargs
        if built and self.dp_field:
            given = (
                plain(kwargs[self.dp_field])
                if self.dp_field in kwargs
                else _declared_default(self.q, made, self.dp_field)
            )
            if given is None:
                batch.fields[self.dp_field] = None
        return batch

    def annotation(self, ev: Any, annotation: ast.expr, frame: Frame) -> Any:
        """A value an annotation promises to be a batch (a helper's return, a parameter) is a fresh one."""
        name = (dotted(annotation) or "").rpartition(".")[2]
        if name not in self.types:
            return self._own_object(ev, annotation, frame)
        return fresh_batch(self.q, ev.tree.resolve_class(frame.module.name, dotted(annotation) or name), self.fields)

    def _own_object(self, ev: Any, annotation: ast.expr, frame: Frame) -> Any:
        """A local of the judged function annotated with a class of its own package, no record or enum
        (`dw: ForkDraftWorker = self._worker`): an object whose methods run where it is called (its fields what
        they write, or unknown), as a parameter so annotated is."""
        if id(annotation) not in self.local_annotations:
            return NOT_HANDLED
        cls = annotated_own_class(self.q, frame.module.name, annotation)
        if cls is None or not ev.plain_class(cls):
            return NOT_HANDLED
        return Obj(cls, label=dotted(annotation) or "")

    def _forward(
        self, ev: Any, batch: Obj, node: ast.Call, frame: Frame, state: State, skips: bool | None, pads: bool
    ) -> None:
        """A forward that plans again only where the batch's predicate says so (never where it is told to skip
        planning), padding a DP-synchronised batch first unless it is one the framework calls once it has padded
        (`pads` false)."""
        reached = self._planned_here(ev, batch, node, state)
        if reached is None:
            return
        at, plans = reached
        # told not to plan, or not: where that is not known here, a finding only where the batch's predicate says
        # not to plan either (skipping would be as wrong), and the class does not override the forward's own padding
        # step (which may plan again)
        overrides = frame.owner is not None and not frame.owner.methods.keys().isdisjoint(self.pad_calls)
        if skips is None and overrides:
            self.undecided.append((at, self._unknown_skip()))
            return
        told, skips = skips is not None, bool(skips)
        if plans & self.assumed:
            self.undecided.append((at, _ASSUMED))
            return
        if len({plan.text for plan in plans}) > 1:
            self.undecided.append((at, "the paths that reach it planned the batch for different counts"))
            return
        planned_count = int(_first(plans).text)
        pad, ran = self._pad_said(batch, state), state
        if plain(ev.getattr(batch, self.count, state, frame.depth)) == planned_count:
            if not pads or not self._synchronised(ev, batch, state, frame.depth):
                return  # the forward does not pad it: it runs the batch it was planned for
            # a forward pads a batch synchronised across DP ranks to the agreed count before it decides to plan,
            # whatever else was written to it since the plan (its query tokens, say)
            ran = state.copy()
            self._pad(ev, batch, ran)
            pad = PADDED_BY_FORWARD
        if plain(ev.getattr(batch, self.count, ran, frame.depth)) == planned_count:
            return  # it runs the batch it was planned for (padded before the plan)
        if skips:
            self.events.append(Event(at, _first(plans), pad or "code after the plan", state.path, skipped=True))
            return
        predicate = ev.getattr(batch, self.predicate, ran, frame.depth)
        if not isinstance(plain(predicate), (Bound, Function)):
            self.undecided.append((at, f"the batch's `{self.predicate}()` is not in the analyzed tree"))
            return
        replans = plain(ev.call(predicate, [], {}, node, frame, ran))
        if not isinstance(replans, (bool, int, type(None))):
            self.undecided.append((at, f"`{self.predicate}()` is not decided on the padded batch"))
        elif not replans:
            self.events.append(Event(at, _first(plans), pad or "code after the plan", state.path))
        elif not told:
            self.undecided.append((at, self._unknown_skip()))

    def forward_after(self, ev: Any, scope: Scope, bindings: dict[str, Any], ends: list) -> None:
        """The forward the framework runs after its padding step (`_forward_raw`: the eager runner's `execute`), of
        each batch the step was handed, as each path of the step leaves it: padded already, it asks the batch's
        predicate whether to plan again."""
        batches = [v for v in bindings.values() if isinstance(v, Obj) and self.is_batch(v)]
        frame = Frame(scope.module, scope.cls, None, 0)
        for state, _ in ends:
            for batch in batches:
                self._forward(ev, batch, scope.node, frame, state, skips=False, pads=False)

    def _holds(
        self, ev: Any, batch: Obj, node: ast.AST, frame: Frame, state: State, tests: list[tuple[str, ...]]
    ) -> bool | None:
        """Whether one of the batch's predicates `tests` holds on this path: True where one does (the batch's mode
        known, or a test that passed said so), False where each is known not to, None where that is not known."""
        answers = []
        for *path, name in tests:
            value: Any = batch
            for attr in path:
                value = ev.getattr(value, attr, state, frame.depth)
            method = ev.getattr(value, name, state, frame.depth)
            asked = answer_key(method)
            answer = state.writes.get(asked) if asked is not None else None
            if answer is None and isinstance(plain(method), (Bound, Function)):
                answer = plain(ev.call(method, [], {}, node, frame, state))
            if answer is True:
                return True
            answers.append(answer)
        return False if all(answer is False for answer in answers) else None

    def _replanned_always(self, ev: Any, batch: Obj, node: ast.Call, frame: Frame, state: State) -> bool:
        """Whether a forward that plans again whatever it is told (`replan_always_forwards`) does so for this batch:
        every plan it had was made where one of `replan_always_when` held (a target verify), and nothing since made
        that false."""
        plans = _happened(state, batch, PLANNED)
        return (
            bool(plans)
            and plans <= self.always_planned
            and self._holds(ev, batch, node, frame, state, self.always_when) is not False
        )

    def _unknown_skip(self) -> str:
        said = ", ".join(f"`{k}`" for k in self.skip_keywords)
        return f"whether the forward is told not to plan ({said}) is not known here"


_ASSUMED = "the count the batch was planned for is one the evaluation could not compute"


def _settings_only(q: Question, cls: ClassInfo, attr: str) -> bool:
    """Whether every write of `self.<attr>` in the lineage stores a literal, a name or a container of those (a
    setting, as `_setting` keeps): read by the syntax alone, so that the writers of the objects an instance holds
    (its runners, its backends) are never run for it."""
    key = ("sg106-settings", cls.key, attr)
    if key not in q.program.memo:
        values = [
            (klass.module, value)
            for klass, method in writers(cls, q.program, attr)
            for value in _stored(method).get(attr, ())
        ]
        tests = frozenset(q.pack.batches.dp_tests) | frozenset(q.pack.batches.dp_sizes)
        q.program.memo[key] = bool(values) and all(
            _literal_or_name(v, tests) or _built_record(q, module, v, tests) for module, v in values
        )
    return q.program.memo[key]  # type: ignore[no-any-return]


def _holds_planner(q: Question, cls: ClassInfo, attr: str) -> bool:
    """Whether every write of `self.<attr>` in the lineage builds a helper of the tree that plans through another
    object (`self.planner = DraftBatchPlanner(backend)`, whose `plan(batch)` plans on the backend it keeps and marks
    the batch), or stores a function of the tree that plans, as it is or as a function made by one
    (`self._plan = plan_and_mark`, `self._plan = make_planner(backend, replan=False)`, a closure): its methods, or
    it, then run. Not a backend or a runner (a class defining a plan or a forward itself), whose calls the rule
    reads by name."""
    key = ("sg106-planner", cls.key, attr)
    if key not in q.program.memo:
        values = [
            (klass.module, value)
            for klass, method in writers(cls, q.program, attr)
            for value in _stored(method).get(attr, ())
        ]
        built = {(home, dotted(v.func) or "") for home, v in values if isinstance(v, ast.Call)}
        helper = len(built) == len(values) == 1 and _plans_through_another(q, *next(iter(built)))
        q.program.memo[key] = helper or bool(values) and all(_function_that_plans(q, *found) for found in values)
    return q.program.memo[key]  # type: ignore[no-any-return]


def _held_classes(q: Question, cls: ClassInfo, attr: str) -> list[str]:
    """Where every write of `self.<attr>` in the lineage stores a parameter of its writer whose annotation names a
    class of the tree (`self.target_runner = runner`, `runner: "ModelRunner"`), and all name one: its name and its
    bases' names; else none."""
    key = ("sg106-held-classes", cls.key, attr)
    if key not in q.program.memo:
        found: set[tuple[str, str]] = set()
        held: ClassInfo | None = None
        for klass, method in writers(cls, q.program, attr):
            params = {
                a.arg: a.annotation for a in [*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs]
            }
            for value in _stored(method).get(attr, ()):
                annotation = params.get(value.id) if isinstance(value, ast.Name) else None
                if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
                    annotation = ast.Name(annotation.value) if annotation.value.isidentifier() else None
                held = q.program.resolve_class(klass.module, dotted(annotation) or "") if annotation else None
                found.add(held.key if held is not None else ("", ""))
        q.program.memo[key] = (
            [k.name for k in q.program.ancestors(held)] if held is not None and len(found) == 1 else []
        )
    return q.program.memo[key]  # type: ignore[no-any-return]


def _function_that_plans(q: Question, module: str, value: ast.expr) -> bool:
    """Whether `value` names a function of the tree whose text plans, calls one that makes such a function (a
    closure it defines and returns), binds one (`functools.partial(plan_and_mark, backend)`), or is a table of
    those (`{ForwardMode.DECODE: partial(...), ...}`, a list, a tuple)."""
    if isinstance(value, ast.Dict):
        return bool(value.values) and all(_function_that_plans(q, module, v) for v in value.values)
    if isinstance(value, (ast.List, ast.Tuple)):
        return bool(value.elts) and all(_function_that_plans(q, module, v) for v in value.elts)
    if isinstance(value, ast.Call) and (dotted(value.func) or "").rpartition(".")[2] == "partial" and value.args:
        return _function_that_plans(q, module, value.args[0])
    name = dotted(value.func) if isinstance(value, ast.Call) else dotted(value)
    found = q.program.resolve(module, name) if name else None
    if not (isinstance(found, tuple) and isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef))):
        return False
    return not _attributes_and_names(found[1])[0].isdisjoint(q.pack.batches.plan)


def _plans_through_another(q: Question, module: str, name: str) -> bool:
    """Whether the class `name` (as `module` sees it) has a method that plans, and neither it nor a base defines a
    plan or a forward of its own."""
    helper = q.program.resolve_class(module, name)
    if helper is None or not _class_plans(q, module, name, q.pack.batches.plan):
        return False
    own = {*q.pack.batches.plan, *(n.rpartition(".")[2] for n in q.pack.batches.forwards)}
    return not any(own & set(klass.methods) for klass in q.program.ancestors(helper))


def _stored(method: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, list[ast.expr]]:
    """The values a method assigns to any object's attributes, by the attribute's name: read once per method."""

    def read(node: ast.AST) -> dict[str, list[ast.expr]]:
        stored: dict[str, list[ast.expr]] = {}
        for statement in walked(node):
            if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
                for target in _targets(statement):
                    if isinstance(target, ast.Attribute):
                        stored.setdefault(target.attr, []).append(statement.value)
        return stored

    return cached_on(method, "sg106_stored", read)  # type: ignore[no-any-return]


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def _literal_or_name(node: ast.expr, tests: frozenset[str]) -> bool:
    """A setting by its syntax: literals and names, containers, logic and comparisons of those, the pack's DP
    tests and sizes asked with no argument or read as a field (`not require_mlp_sync()`,
    `not server_args.enable_dp_attention`, `attn_dp_size > 1`: the rule knows their answer), and a partial of a
    method read off the instance with settings bound; and a field of a configuration (`server_args.x`,
    `get_spec().x`), which no writer of the instance's own objects sets."""
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, ast.Attribute):  # (`self.plan_decode`: a method of its own, run where it is called)
        return node.attr in tests or _configuration_field(node) or _of_self(node)
    if isinstance(node, ast.Compare):
        return all(_literal_or_name(v, tests) for v in (node.left, *node.comparators))
    if isinstance(node, ast.Call):
        name = (dotted(node.func) or "").rpartition(".")[2]
        if name in tests:
            return not node.args and not node.keywords
        if name == "partial" and node.args:
            # a callable the instance keeps (`partial(self.backend.init_forward_metadata)`,
            # `partial(preplan, self.runner.attn_backend)`): what it calls is a name the rule reads, and what it
            # binds are settings or objects the instance holds, handed on as they are
            first, rest = node.args[0], [*node.args[1:], *(k.value for k in node.keywords)]
            return _attribute_chain(first) and all(_literal_or_name(v, tests) or _attribute_chain(v) for v in rest)
        return False
    if isinstance(node, ast.Dict):
        pairs = zip(node.keys, node.values, strict=True)
        return all(k is not None and _literal_or_name(k, tests) and _literal_or_name(v, tests) for k, v in pairs)
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(_literal_or_name(e, tests) for e in node.elts)
    if isinstance(node, ast.BoolOp):
        return all(_literal_or_name(v, tests) for v in node.values)
    return isinstance(node, ast.UnaryOp) and _literal_or_name(node.operand, tests)


def _configuration_field(node: ast.Attribute) -> bool:
    """`server_args.speculative_num_steps`, `get_spec().speculative_num_steps`: fields read off a name that is not
    the instance, or off what a module function returns when called with no argument."""
    root: ast.expr = node
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Call):
        return isinstance(root.func, ast.Name) and not root.args and not root.keywords
    return isinstance(root, ast.Name) and root.id not in ("self", "cls")


def _of_self(node: ast.Attribute) -> bool:
    """`self.plan_decode`: an attribute read off the instance itself (its value decides whether it is kept)."""
    return isinstance(node.value, ast.Name) and node.value.id == "self"


def _attribute_chain(node: ast.expr) -> bool:
    """`self.backend.init_forward_metadata`: names read off one another, nothing called."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _setting(value: Any) -> bool:
    """A plain value: a flag, a count, a name, None, or a dict, list or tuple of such (keywords kept to pass on), an
    object of the tree whose fields are such (a frozen policy), a partial of a call the rule can name (a hook: what
    it binds is handed on as it was), or one of a few of those (None until a hook is installed)."""
    value = plain(value)
    if isinstance(value, Partial):
        return _name(value) is not None
    if isinstance(value, Bound):  # a method of the tree, bound: run where it is called
        return True
    if isinstance(value, OneOf):  # a hook, None until it is installed
        return all(_setting(option) for option in value.options)
    if isinstance(value, Obj):
        return _record(value) and all(_setting(v) for v in value.fields.values())
    if isinstance(value, dict):  # keyed by names, numbers or members of an enum (a handler per mode)
        return all(isinstance(k, (str, int, EnumMember)) and _setting(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_setting(v) for v in value)
    return isinstance(value, (bool, int, float, str, type(None)))


def _record(value: Obj) -> bool:
    """An object of a class of the tree that only holds fields: a policy, a config; not a runner or a backend,
    whose methods the rule reads calls by."""
    return value.cls is not None and _record_class(value.cls)


def _record_class(cls: ClassInfo) -> bool:
    """A class whose methods other than dunders only compute from its own fields (`DraftPlanPolicy.mark_kwargs`,
    returning `{"replan_equivalent": self.replan_equivalent}`): they call nothing but Python's own builtins and
    its own methods."""
    return all(
        isinstance(call.func, ast.Name)
        and call.func.id in _PURE_BUILTINS
        or isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "self"
        and call.func.attr in cls.methods
        for name, method in cls.methods.items()
        if not (name.startswith("__") and name.endswith("__"))
        for call in walked(method)
        if isinstance(call, ast.Call)
    )


_PURE_BUILTINS = frozenset({"dict", "list", "tuple", "set", "bool", "int", "float", "str", "len", "min", "max"})


def _built_record(q: Question, module: str, node: ast.expr, tests: frozenset[str]) -> bool:
    """`DraftPlanPolicy(replan_equivalent=True)`: a record of the tree (see `_record_class`) built of settings."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Name, ast.Attribute)):
        return False
    if not all(_literal_or_name(v, tests) for v in (*node.args, *(k.value for k in node.keywords))):
        return False
    cls = q.program.resolve_class(module, dotted(node.func) or "")
    return cls is not None and _record_class(cls)


def _bindings(q: Question, scope: Scope, fields: frozenset[str]) -> dict[str, Any]:
    """The function's parameters: `self`, and a fresh batch for each parameter that is one by its annotation or
    name (an instance of the tree's batch class where the annotation names it, so its methods run)."""
    names = q.pack.batches
    params = [*scope.node.args.posonlyargs, *scope.node.args.args, *scope.node.args.kwonlyargs]
    # a parameter of no class the rule reads is an object known by its name: what a test asks of it
    # (`batch.forward_mode.is_target_verify()`) is asked of the same object wherever it is read again
    bindings: dict[str, Any] = {p.arg: Sym(p.arg) for p in params}
    if scope.bound and params:
        bindings[params[0].arg] = q.self_value(scope)
    for param in params[1 if scope.bound else 0 :]:
        if annotation_names(param.annotation) & set(names.batch_types) or param.arg in names.batch_params:
            batch = fresh_batch(q, _batch_class(q, scope, param), fields)
            # `micro_batches: Sequence[ForwardBatch]`: every batch in it is like that one, taken as its one batch (a
            # loop that plans each and one that runs each meet the same batch, in one round each, so the fields its
            # predicate reads are those one round left, never a join of rounds)
            bindings[param.arg] = [batch] if _sequence_annotation(param.annotation) else batch
        elif isinstance(param.annotation, (ast.Name, ast.Attribute)):
            cls = q.program.resolve_class(scope.module.name, dotted(param.annotation) or "")
            if cls is not None and _plain_class(q, cls):
                bindings[param.arg] = Obj(cls, label=param.arg)  # `handle: DraftRunnerHandle`: its methods run
            elif cls is not None:
                record = _record_holding_a_batch(q, cls, fields, param.arg)
                if record is not None:
                    bindings[param.arg] = record
    return bindings


def _record_holding_a_batch(q: Question, cls: ClassInfo, fields: frozenset[str], parameter: str) -> Obj | None:
    """A dataclass handed in as `parameter` that declares a field of the batch's type (`ctx: StepContext`,
    whose `forward_batch: ForwardBatch` its caller filled): that field is a fresh batch, every other field a value
    known by its name (its caller filled it, not with the declared default; what a test asks of it, `assert
    batch.forward_mode.is_idle()`, holds at every read, and of a batch made from it)."""
    if q.program.is_enum(cls) or not any(has_decorator(k.node, "dataclass") for k in q.program.ancestors(cls)):
        return None
    declared = {name: note for klass in q.program.ancestors(cls) for name, note in klass.annotations.items()}
    types = set(q.pack.batches.batch_types)
    batches = [name for name, annotation in declared.items() if annotation_names(annotation) & types]
    if not batches:
        return None
    values: dict[str, Any] = {field: Sym(f"{parameter}.{field}") for field in declared}
    for field in batches:
        annotation = dotted(declared[field]) or ""
        values[field] = fresh_batch(q, q.program.resolve_class(cls.module, annotation), fields)
    return Obj(cls, values, label=parameter)


def _plain_class(q: Question, cls: ClassInfo) -> bool:
    """A class whose instance is what its constructor made of it, nothing the evaluation can read without running
    it: no enum, dataclass or class-level value in its lineage (a `ScheduleBatch` taken for its declared defaults
    would have no `spec_info`, where a real one has). Read once per class: every run of a function asks again."""
    key = ("sg106-plain-class", cls.key)
    if key not in q.program.memo:
        q.program.memo[key] = not q.program.is_enum(cls) and not any(
            klass.attributes or has_decorator(klass.node, "dataclass") for klass in q.program.ancestors(cls)
        )
    return q.program.memo[key]  # type: ignore[no-any-return]


_SEQUENCES = frozenset({"Sequence", "List", "list", "Tuple", "tuple", "Iterable", "Iterator", "Collection"})


def _sequence_annotation(annotation: ast.expr | None) -> bool:
    """`Sequence[X]`, `list[X]`, `Optional[List[X]]`: a collection of its element type."""
    if isinstance(annotation, ast.Subscript):
        if last_name(annotation.value) in _SEQUENCES:
            return True
        if last_name(annotation.value) == "Optional":
            return _sequence_annotation(annotation.slice)
    return False


def fresh_batch(q: Question, cls: ClassInfo | None, handed: frozenset[str] | None = None) -> Obj:
    """A batch of REAL_COUNT requests synchronised across DP ranks with one of PADDED_COUNT (its per-rank counts
    where the pack names the field). A batch the code builds has its other fields as its class declares them; one
    `handed` to it (a parameter, a helper's return) was filled by code not evaluated here, so only the fields its
    predicate reads (`handed`: not marked yet) are the declared ones, and the others are unknown (`spec_info` is
    not the class's None)."""
    names = q.pack.batches
    fields: dict[str, Any] = {names.count_field or "": REAL_COUNT}
    if names.dp_field:
        fields[names.dp_field] = [REAL_COUNT, PADDED_COUNT]
    if names.token_field:
        fields[names.token_field] = tokens(REAL_COUNT)
    if handed is None or cls is None:
        return Obj(cls, fields, defaults=True, label="batch")
    for name in handed - set(fields):
        declared = _declared_default(q, cls, name)
        if declared is not _UNDECLARED:
            fields[name] = declared
    return Obj(cls, fields, defaults=False, label="batch")


_UNDECLARED = object()


def _declared_default(q: Question, cls: ClassInfo, name: str) -> Any:
    """The literal a class (or an ancestor) declares for a field (`= False`, `= field(default=False)`)."""
    for klass in q.program.ancestors(cls):
        if name in klass.attributes:
            value = field_default(klass.attributes[name])
            try:
                return ast.literal_eval(value) if value is not None else _UNDECLARED
            except ValueError:
                return _UNDECLARED
    return _UNDECLARED


def tokens(count: int) -> Obj:
    """A batch's query tokens, one per request: what the rule reads of them is how many there are."""
    return Obj(None, {"shape": (count,)}, label="tokens")


def _batch_class(q: Question, scope: Scope, param: ast.arg) -> ClassInfo | None:
    """The tree's class a batch parameter's annotation names (None: unannotated, or a class outside the tree)."""
    for name in annotation_names(param.annotation):
        found = q.program.resolve_class(scope.module.name, name)
        if found is not None and is_batch_class(q, found):
            return found
    return None


def _planning_names(q: Question) -> frozenset[str]:
    """The pack's planning and padding calls, and the names in this module that reach one (see `_reaching_names`)."""
    names = q.pack.batches
    return _reaching_names(q, {*names.plan, *names.pad_methods, *names.pad_calls}, names.plan)


def _forwarding_names(q: Question) -> frozenset[str]:
    """The pack's forwards (the model's own by their last name), and the names in this module that reach one: a
    function reaching none cannot run a planned batch, so it has nothing to judge."""
    names = q.pack.batches
    calls = sorted({name.rpartition(".")[2] for name in [*names.forwards, *names.model_forwards]})
    return _reaching_names(q, set(calls), calls)


def _reaching_names(q: Question, seeds: set[str], calls: list[str]) -> frozenset[str]:
    """`seeds`, and the names in this module that reach one of `calls`: its functions and methods whose text names
    one, methods its classes inherit whose own text does, attributes assigned from an expression that names one (a
    stored `partial`), and module functions of the tree it calls whose text calls one (SGLang's
    `prepare_for_draft_extend`); to a fixed point. A cheap preselection, by reading: the evaluation decides."""
    found = set(seeds) | _inherited_callers(q, calls)
    called, stores = _calls_and_stores(q)
    found |= {name.rpartition(".")[2] for module, name in called if _function_plans(q, module, name, calls, hops=2)}
    found |= {method for module, name in called for method in _class_plans(q, module, name, calls)}
    while True:
        more = {scope.node.name for scope in q.scopes if scope.node.name not in found and scope.mentions(found)}
        named = words(frozenset(found))
        for text, attributes in stores:
            if named.search(text):
                more |= attributes - found
        if not more:
            return frozenset(found)
        found |= more


def _inherited_callers(q: Question, calls: list[str]) -> set[str]:
    """Methods the classes of this module inherit (or the objects they keep have) whose own text names one of
    `calls` (SGLang's `_init_frozen_kv_metadata`, which plans and marks); not those that only name another such
    method, nor the pack's forwards and plans or dunders: every method of an attention backend would reach a plan
    that way."""
    pattern = words(frozenset(calls))
    skip = {*(name.rpartition(".")[2] for name in q.pack.batches.forwards), *q.pack.batches.plan}
    found: set[str] = set()
    own = [q.program.ancestors(c)[1:] for c in {id(s.cls): s.cls for s in q.scopes if s.cls is not None}.values()]
    # the objects its classes keep or build (see `held_instance`)
    held = [q.program.ancestors(c) for c in held_classes(q, built=True)]
    for klasses in own + held:
        for klass in klasses:
            module = q.program.module(klass.module)
            for name, node in klass.methods.items():
                if name in skip or name in found or (name.startswith("__") and name.endswith("__")):
                    continue
                if pattern.search(definition_text(module, node)):
                    found.add(name)
    return found


def _calls_and_stores(q: Question) -> tuple[set[tuple[str, str]], list[tuple[str, set[str]]]]:
    """The functions this module calls by a bare name or through a module it imports (`plan_utils.run_model(...)`),
    with the module that calls them, and each assignment to attributes (the value's text, the attributes): read
    once per file."""
    key = ("sg106-calls-and-stores", q.module.name)
    if key not in q.program.memo:
        imported = {*q.module.imports, *q.module.module_imports}
        called: set[tuple[str, str]] = set()
        stores: list[tuple[str, set[str]]] = []
        for scope in q.scopes:
            for node in walked(scope.node):
                name = dotted(node.func) if isinstance(node, ast.Call) else None
                if name and ("." not in name or name.count(".") == 1 and name.partition(".")[0] in imported):
                    called.add((scope.module.name, name))
                if isinstance(node, ast.Call):  # a function handed on to be called later (`partial(plan_and_mark)`)
                    handed = [*node.args, *(k.value for k in node.keywords)]
                    names = {a.id for a in handed if isinstance(a, ast.Name)}
                    called |= {(scope.module.name, n) for n in names & imported}
                elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    attributes = {t.attr for t in _targets(node) if isinstance(t, ast.Attribute)}
                    if attributes:
                        stores.append((ast.unparse(node.value), attributes))
        for node in q.module.tree.body:  # a module's table of steps (`PIPELINES = {"extend": [plan, forward]}`)
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                names = {t.id for t in _targets(node) if isinstance(t, ast.Name)}
                if names:
                    stores.append((ast.unparse(node.value), names))
        q.program.memo[key] = (called, stores)
    return q.program.memo[key]  # type: ignore[no-any-return]


def _function_plans(q: Question, module: str, name: str, plan: list[str], hops: int) -> bool:
    """Whether the module function `name` (as `module` sees it) plans by its text, or names a function of its own
    module that does (a factory returning a `partial` of a planning forward), up to `hops` functions deep."""
    target = q.program.resolve(module, name)
    if not isinstance(target, tuple) or not isinstance(target[1], ast.FunctionDef):
        return False
    home, function = target[0], target[1]
    key = ("sg106-function-plans", home.name, function.name, tuple(plan), hops)
    if key not in q.program.memo:
        attributes, names = _attributes_and_names(function)
        plans = not attributes.isdisjoint(plan)
        if not plans and hops > 1:
            defined = {n.name for n in home.tree.body if isinstance(n, ast.FunctionDef)} - {function.name}
            plans = any(_function_plans(q, home.name, other, plan, hops - 1) for other in sorted(names & defined))
        q.program.memo[key] = plans
    return q.program.memo[key]  # type: ignore[no-any-return]


def _class_plans(q: Question, module: str, name: str, plan: list[str]) -> frozenset[str]:
    """The methods of the class `name` (as `module` sees it, a class this module builds) whose own text names one
    of `plan` (a helper object's `prime()` that plans and marks the batch it holds), by the name a caller calls
    them: the class's own where its constructor, its `__enter__` (`with PrePlanned(batch) as fb:`) or its
    `__call__` (an instance called, `self._planner(fb)`) does."""
    cls = q.program.resolve_class(module, name)
    if cls is None:
        return frozenset()
    key = ("sg106-class-plans", cls.key, tuple(plan))
    if key not in q.program.memo:
        q.program.memo[key] = frozenset(
            cls.name if method in ("__init__", "__post_init__", "__enter__", "__exit__", "__call__") else method
            for method, node in cls.methods.items()
            if not _attributes_and_names(node)[0].isdisjoint(plan)
        )
    return q.program.memo[key]  # type: ignore[no-any-return]


def _attributes_and_names(function: ast.FunctionDef) -> tuple[frozenset[str], frozenset[str]]:
    """The attribute names and the bare names a function's text uses: read once per function."""

    def read(node: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
        nodes = list(walked(node))
        return (
            frozenset(n.attr for n in nodes if isinstance(n, ast.Attribute)),
            frozenset(n.id for n in nodes if isinstance(n, ast.Name)),
        )

    return cached_on(function, "sg106_words", read)  # type: ignore[no-any-return]


def judge(q: Question) -> Iterator[Judgement]:
    reaching = _planning_names(q)
    forwarding: frozenset[str] | None = None
    fields: frozenset[str] | None = None  # the predicate's fields, read once per file where a scope is judged
    for scope in q.scopes:
        if not scope.mentions(reaching):
            continue
        forwarding = _forwarding_names(q) if forwarding is None else forwarding
        templates = list(_templates(q, scope))
        if not scope.mentions(forwarding) and not _pad_step(q, scope) and not templates:
            continue  # (a hook a base's method calls before its forward is judged as that method runs it)
        fields = _predicate_fields(q) if fields is None else fields
        if constructor_refuses(q, scope, partial(_Batches, q, fields), "DP"):
            continue  # no instance of its class exists with DP attention on, the only case the rule asks about
        found = _judge(q, scope, fields, templates)
        if found is not None:
            yield found


def _judge(q: Question, scope: Scope, fields: frozenset[str], templates: list[Scope]) -> Judgement | None:
    """The scope's judgement; where it decides nothing and it is a hook that plans, as each of `templates` (see
    `_templates`) runs it."""
    judged = _judge_own(q, scope, fields)
    if templates and (judged is None or not judged.decided) and _planned_only(q, scope, fields):
        for template in templates:
            found = _judge_own(q, template, fields)
            if found is not None and found.decided:
                # the override plans and marks; the base's method that calls it on this class's instance runs it
                at = place_text(str(template.module.path), found.span[0], str(scope.module.path))
                message = f"`{template.qualname}`, which calls this override, runs its batch ({at}): {found.message}"
                return q.judgement("SG106", scope, scope.node, message)
    return judged


def _planned_only(q: Question, scope: Scope, fields: frozenset[str]) -> bool:
    """Whether the method, run on its own, plans a batch and runs none (a hook of a base's method that runs it)."""
    hooks = _Batches(q, fields)
    hooks.owner, hooks.local_annotations = scope.cls, _local_annotations(scope)
    ev = q.evaluator(hooks)
    try:
        ev.run(scope.function, _bindings(q, scope, fields))
    except (OutOfBudget, RecursionError):
        return False
    return bool(hooks.planned) and not hooks.forwarded


def _templates(q: Question, scope: Scope) -> Iterator[Scope]:
    """The methods a base of the method's class defines, and the class inherits as they are, that call the method
    on `self` (a template method whose hook it overrides), each as run on an instance of the method's class."""
    name = scope.node.name
    if not scope.bound or scope.cls is None:
        return
    own = scope.cls.methods.values()
    for klass in q.program.ancestors(scope.cls)[1:]:
        module = q.program.module(klass.module)
        for method_name, method in klass.methods.items():
            found = q.program.method(scope.cls, method_name)
            if module is None or method_name == name or found is None or found[0] is not method:
                continue
            # (one its own class calls is judged there, on this class's instance: the finding is that method's)
            if name in self_calls(method) and not any(method_name in self_calls(m) for m in own):
                yield Scope(f"{klass.name}.{method_name}", scope.class_name, scope.cls, method, module)


def _judge_own(q: Question, scope: Scope, fields: frozenset[str]) -> Judgement | None:
    runs: list[_Batches] = []  # every run made, each one path (or the paths it joined): a forward on any is one

    def run(choices: Choices) -> _Batches:
        hooks = _Batches(q, fields)
        hooks.owner, hooks.local_annotations = scope.cls, _local_annotations(scope)
        ev = q.evaluator(hooks)
        ev.choices = choices
        bindings = _bindings(q, scope, fields)
        if not _run_decorated(q, scope, ev, hooks, bindings):
            flow = ev.run(scope.function, bindings)
            if _pad_step(q, scope):
                hooks.forward_after(ev, scope, bindings, flow.returns)
        runs.append(hooks)
        return hooks

    # the tests that matter: those whose sides plan, pad or mark the batch or not (a plan and a mark under one
    # test, a forward after both sides met, read path by path)
    kinds = frozenset({PLANNED, PADDED, CALLED})
    noted = Choices(kinds, kept_kinds=kinds, fields=fields)
    complete = True  # whether the paths run after the joined one are every path through the tests that matter
    try:
        joined = run(noted)
        if not joined.events and (joined.undecided or joined.lost_plan()):
            complete = each_path(run, noted) is not None
            if not complete:  # too many paths through its callees' tests: its own tests alone
                own = Choices(kinds, kept_kinds=kinds, depth=0, fields=fields)
                run(own)
                complete = each_path(run, own) is not None
            elif not any(hooks.events for hooks in runs) and any(hooks.undecided for hooks in runs[1:]):
                # still not decided path by path: the tests of its callees' callees in its own package may choose
                # too (a hook that plans and marks the batch on one path only, handed back beside the flag that
                # says which)
                start = len(runs)
                package = scope.module.name.partition(".")[0]
                deeper = Choices(kinds, kept_kinds=kinds, depth=2, fields=fields, within=package)
                run(deeper)
                if each_path(run, deeper) is not None:
                    runs[1:] = runs[start + 1 :]  # these paths, each decided or not, say it
                elif not any(hooks.events for hooks in runs[start:]):
                    del runs[start:]
    except (OutOfBudget, RecursionError):
        return q.out_of_budget("SG106", scope)
    events = [e for hooks in runs for e in hooks.events]
    if events:
        event = min(events, key=lambda e: (len(e.path), getattr(e.forward, "lineno", 0)))
        unplanned = (
            "the model runs it with no plan in between: plan after padding"
            if event.model
            else "the forward is told not to plan it again: plan after padding, or let the forward plan"
            if event.skipped
            else f"the batch's `{q.pack.batches.replan_predicate}()` says not to plan again: plan after padding, "
            "or mark the batch so that a padded batch is planned again"
        )
        forward = (
            "the forward this function runs, as its decorators wrap it,"
            if event.forward is scope.node and any(hooks.decorated for hooks in runs)
            else f"the forward that the framework runs after this padding step (`{_after_padding(q)}`)"
            if event.forward is scope.node  # (see `_Batches.forward_after`)
            else "this forward"
        )
        message = (
            f"{forward} runs a batch whose attention metadata was planned at {_place(event.plan)} for another "
            f"shape than it now has ({event.pad} padded it after the plan), and {unplanned}"
        )
        return q.judgement("SG106", scope, event.forward, message, doubts="; ".join(doubts(event.path)))
    # not decided where some path could not be judged and none was found wrong; where every path was run after the
    # joined one and each decided, the joined run's doubt was only the joining
    by_path = len(runs) > 1 and complete
    undecided = [u for hooks in (runs[1:] if by_path else runs) for u in hooks.undecided]
    if undecided:
        at, why = undecided[0]
        return q.undecided("SG106", scope, at, f"`{scope.qualname}`", why)
    return None


def _local_annotations(scope: Scope) -> frozenset[int]:
    """The annotations of the judged function's own annotated locals (`dw: ForkDraftWorker = ...`): read once per
    function, every run of it (one per path) asks again."""

    def read(function: ast.AST) -> frozenset[int]:
        return frozenset(
            id(node.annotation)
            for node in walked(function)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        )

    return cached_on(scope.node, "sg106_local_annotations", read)  # type: ignore[no-any-return]


def _run_decorated(q: Question, scope: Scope, ev: Any, hooks: _Batches, bindings: dict[str, Any]) -> bool:
    """Run the function as its own package's decorators wrap it (`@single_rank_only(fallback=...)` runs it only
    where DP attention is off, `@timed(...)` runs it as it is), called with its parameters: what the wrapper runs
    is the judged function's, reported at its `def`. Other decorators (`torch.no_grad()`, a framework's) are taken
    to run it as written. False where none of its own wraps it, or one does not return a function."""
    state = State(dict(bindings), {}, frozenset())
    frame = Frame(scope.module, scope.cls, None, 0)
    ev.home = ev.here = scope.module.path
    wrapped: Any = scope.function
    applied = False
    for decorator in reversed(scope.node.decorator_list):
        maker = plain(ev.eval(decorator, frame, state))  # `timed("x")`: the decorator that call makes
        if not isinstance(maker, Function) or not own_module(q, maker.module.name):
            continue
        wrapped = plain(ev.call(maker, [wrapped], {}, decorator, frame, state))
        applied = True
        if not isinstance(wrapped, (Function, Partial, Bound)):
            return False
    if not applied:
        return False
    arguments = scope.node.args
    positional = [bindings[a.arg] for a in [*arguments.posonlyargs, *arguments.args]]
    keywords = {a.arg: bindings[a.arg] for a in arguments.kwonlyargs}
    hooks.decided_here.add(id(scope.node))  # what happens inside the wrapper's run is the function's own
    hooks.decorated = True
    ev.call(wrapped, positional, keywords, scope.node, frame, state)
    return True


def _pad_step(q: Question, scope: Scope) -> bool:
    """An override of the framework's own padding step (`ModelRunner._prepare_eager_forward_batch`), which the
    framework runs right before a forward of the batch it hands it."""
    return scope.bound and scope.node.name in q.pack.batches.pad_calls


def _predicate_fields(q: Question) -> frozenset[str]:
    """The fields of the batch that its re-plan predicate reads on `self` (the readiness mark, the shapes recorded),
    for each batch class this file names: a test whose sides write one of them differently (a mark dropped by
    assigning the field) is taken path by path, as one whose sides call the batch's marking method is."""
    names = q.pack.batches
    fields: set[str] = set()
    for type_name in names.batch_types:
        cls = q.program.resolve_class(q.module.name, type_name)
        found = q.program.method(cls, names.replan_predicate or "") if cls is not None else None
        if found is None:
            continue
        method = found[0]
        first = method.args.args[0].arg if method.args.args else "self"
        fields |= {
            n.attr
            for n in walked(method)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == first
        }
    return frozenset(fields)


def _after_padding(q: Question) -> str:
    return next(iter(q.pack.batches.forwards_after_padding), "forward")


def _place(plan: Label) -> str:
    line = plan.span[0] if plan.span else 0
    return f"{plan.path}:{line}" if plan.path else f"line {line}"


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    for judgement in report_judgements("SG106", ctx):
        yield Diagnostic(None, judgement.message, judgement.scope, judgement.span)


def _plans(facts: Any, pack: Pack, mentions: frozenset[str]) -> bool:
    """A file that names a plan or one of the framework's methods that plan, marks a batch planned (and may plan
    through a helper it imports), or asks the batch whether to plan (and may plan through an inherited method)."""
    names = [*pack.batches.plan, *pack.batches.plan_helpers, *pack.batches.marks, pack.batches.replan_predicate]
    return any(name in mentions for name in names if name)


# The batch class of the examples: a plan mark that records the shape planned, and the predicate that reads it.
_BATCH = """
        import functools
        from dataclasses import dataclass

        from sglang.srt.utils import require_mlp_sync


        @dataclass
        class ForwardBatch:
            batch_size: int
            forward_metadata_ready: bool = False
            spec_info: object = None
            planned_batch_size: int = 0
            replan_equivalent: bool = False

            def mark_forward_metadata_ready(self, replan_equivalent=False):
                self.forward_metadata_ready = True
                self.planned_batch_size = self.batch_size
                self.replan_equivalent = replan_equivalent

            def needs_forward_metadata_init(self):
                if not self.forward_metadata_ready:
                    return True
                return self.replan_equivalent and self.batch_size != self.planned_batch_size

            def prepare_mlp_sync_batch(self, runner):
                self.batch_size = runner.padded_batch_size
"""


RULE = Rule(
    code="SG106",
    name="plan-before-padding",
    title="attention metadata planned for a batch that is padded before a forward that does not plan again",
    summary=(
        "Flags a function in which a batch's attention metadata is planned (`init_forward_metadata(batch)`, or "
        "another call the pack's `[batches] plan` names), the batch is then padded to more requests (the batch's "
        "`prepare_mlp_sync_batch()`, or the forward's own padding for DP attention), and a forward runs it whose "
        "decision to plan again, the batch's `needs_forward_metadata_init()`, says no. The rule evaluates that "
        "predicate on the batch as the function leaves it (its readiness mark, the shapes recorded when it was "
        "marked, the padded count), with DP attention on."
    ),
    why=(
        "The plan describes the real batch (its request count, its `qo_indptr`), the query the forward runs has "
        "the padded count: FlashInfer's prefill `run` refuses (`q.shape[0] ... does not match qo_indptr[-1]`) and "
        "its decode path runs silently on the wrong geometry. SGLang's EAGLE draft path does this when the batch "
        "will not replay a CUDA graph: it plans for the real batch and marks it ready, and the model runner then "
        "pads the batch for DP attention and skips planning because the batch is marked."
    ),
    bad=_BATCH
    + """

        class DraftWorker:
            def draft(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                forward_batch.prepare_mlp_sync_batch(self.draft_runner)
                return self.draft_runner.forward(forward_batch)  # SG106

            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)  # SG106: the forward pads it for DP attention

            def _plan_seed(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()


        class SeedDraftWorker(DraftWorker):
            def draft_seed(self, forward_batch: ForwardBatch):
                assert forward_batch.spec_info is not None  # its caller filled it, whatever the class declares
                if forward_batch.needs_forward_metadata_init():
                    self._plan_seed(forward_batch)  # an inherited method plans and marks
                forward_batch.input_ids = forward_batch.spec_info.bonus_tokens
                return self.draft_runner.forward(forward_batch)  # SG106


        class StrictWorker(DraftWorker):
            def __init__(self):
                self._set_policy(False)  # the backend cannot re-plan a padded batch

            def _set_policy(self, replan):
                self._replan = replan

            def draft_step(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=self._replan)
                return self.draft_runner.forward(forward_batch)  # SG106


        class BoundPlanWorker:
            def __init__(self):
                self._plan = functools.partial(self.draft_attn_backend.init_forward_metadata)

            def draft_step(self, forward_batch: ForwardBatch):
                self._plan(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)  # SG106
    """,
    good=_BATCH
    + """

        class DraftWorker:
            def draft(self, forward_batch: ForwardBatch):
                forward_batch.prepare_mlp_sync_batch(self.draft_runner)
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)

            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
                return self.draft_runner.forward(forward_batch)  # planned again once padded

            def draft_unmarked(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                return self.draft_runner.forward(forward_batch)  # the forward plans the padded batch again

        class PolicyWorker:
            def __init__(self):
                self._replan = False


        class ReplanningWorker(PolicyWorker):
            def __init__(self):
                super().__init__()
                self._set_policy(True)  # the constructor that runs leaves True

            def _set_policy(self, replan):
                self._replan = replan

            def draft_step(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=self._replan)
                return self.draft_runner.forward(forward_batch)  # planned again once padded


        class SyncAwareWorker:
            def __init__(self):
                self.preplan = not require_mlp_sync()  # never under DP attention

            def draft_step(self, forward_batch: ForwardBatch):
                if self.preplan:
                    self.draft_attn_backend.init_forward_metadata(forward_batch)
                    forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)


        def single_rank_only(fallback):
            def wrap(fn):
                def run(*args):
                    return fallback(*args) if require_mlp_sync() else fn(*args)

                return run

            return wrap


        def plan_when_padded(runner, forward_batch: ForwardBatch):
            return runner.forward(forward_batch)


        @single_rank_only(fallback=plan_when_padded)
        def draft_alone(runner, forward_batch: ForwardBatch):
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return runner.forward(forward_batch)  # run as its decorator runs it: never under DP attention
    """,
    check=check,
    applies=_plans,
    framework="sglang",
    judge=judge,
    analysis=(
        "Each function that names a planning call, or a method it has or inherits whose text plans, is evaluated "
        "once with DP attention on (the pack's `[batches] dp_tests`, calls or flags, answer true, and its "
        "`dp_sizes` two; a method of a class whose constructor raises on every path then, by its own statements, "
        "is not judged: no instance of it exists there): a parameter that is a batch by "
        "its annotation or name is a batch of the tree's batch class that is not marked yet (the fields its "
        "predicate reads are the declared ones; the others, filled by code not evaluated, are unknown), whose "
        "methods run as written (`mark_forward_metadata_ready` records what it records). A plan records the count "
        "it was made for; a pad method of the batch pads it, and so does one of the pack's `pad_calls` the batch is "
        "handed where it is synchronised across DP ranks (`model_runner._prepare_eager_forward_batch(batch)`); a "
        "field the class declares as a batch and another method fills is one batch until written; at a forward "
        "a batch synchronised across DP ranks that still has the planned count is padded by the forward itself "
        "(not by one of the pack's `forwards_after_padding`, which the framework calls once it has padded: "
        "SGLang's `EagerRunner.execute`), "
        "and the batch's predicate is "
        f"evaluated on it. Calls are followed {MAX_DEPTH} deep, so the plan, the mark and the forward may each be "
        "in a helper, in another module. A batch the code builds field by field (`ForwardBatch(...)`, a warm-up's) "
        "is synchronised across DP ranks only where it is handed the pack's `dp_field`. An override of one of the "
        "pack's `pad_calls` (the framework's own padding step) is judged as the framework runs it: each path out "
        "of it is followed by the forward of the batch it was handed, one of the `forwards_after_padding`. An "
        "override that plans a batch and runs none, called on `self` by a method a base defines and its class "
        "inherits as written (a template method's hook: `run` calls `self._pre_plan(batch)`, then the forward), "
        "is judged as that method runs on an instance of the override's class.",
        "A forward handed a keyword of the pack's `replan_keywords` as true (`reinit_attn_backend=True`) plans "
        "the batch it runs where one of the pack's `replan_when` holds of the batch on the path "
        "(`forward_mode.is_split_prefill()`, known or tested). "
        "One of the pack's `replan_always_forwards` (the model runner's and the target worker's forwards, which reach "
        "SGLang's eager runner) plans the batch again whatever its mark or keywords where every plan it had was made "
        "where one of `replan_always_when` held (`forward_mode.is_target_verify()`, known or tested) and nothing "
        "since made it false. "
        "A forward handed a keyword of the pack's `skip_keywords` as true (`skip_attn_backend_init=True`, SGLang "
        "before the readiness mark) does not plan at all; one whose keyword the function does not decide (its own "
        "parameter handed on, a test of the batch's mode) is a finding where the batch's predicate says not to plan "
        "either, and not decided where it says to plan or the function's class overrides one of the pack's "
        "`pad_calls` (its own padding step may plan again); the model's own forward (`model_forwards`: "
        "`model_runner.model.forward(...)`) never does, so the batch it runs must have the shape its latest plan "
        "was made for. Where the plan, the pad and the forward all lie inside one call of the function judged, the "
        "finding is the callee's, unless that call's callee is decided by the judged function: a method its `self` "
        "inherits (run with this class's overrides), a callable it holds in a local (a `partial` a factory "
        "returned; not a method of the tree's bound to its object, which is judged where it is defined), a closure "
        "or a lambda (`compose(plan, mark, forward)(state)`), or a function it hands the functions it calls. A "
        "function its own package's decorators wrap is run as the wrapper runs it, its finding at its `def` "
        "(`@single_rank_only(fallback=...)` routes a batch under DP attention to the fallback); a local annotated "
        "with a class of its package (`dw: ForkDraftWorker = ...`) is an object of it, whose methods run; a "
        'module\'s table of steps (`PIPELINES = {"extend": [plan, mark, forward]}`) reaches what its steps do. '
        "A batch made from another (`ForwardBatch.init_new(batch, runner)`) takes the pack's `copied_fields` "
        "from it (its mode), and a parameter the rule has no class for is one object by its name, so a test of "
        "its mode says what the batch made from it is. An object of the analyzed package's own class that the "
        "instance keeps from its constructor's annotated parameter (`self.strategy = strategy`, `strategy: "
        '"DraftStrategy"`), or that its constructor builds and that is no record of settings (`self.padder = '
        "MlpSyncPadder(runner)`), is one of that class, whose methods run where the instance calls them.",
        "Where the tests that matter are taken path by path (a plan, a pad or a mark on one side only), a test whose "
        "sides write a field the batch's predicate reads differently (`forward_metadata_ready = False` under a "
        "test) is one of them, and a test that calls a one-line predicate of the tree (`def active(b): return "
        "b.global_num_tokens_cpu is not None`) narrows what that predicate tests; a skip keyword set on some paths "
        "only is read on each. They are taken so after a run with the paths joined that left a site undecided "
        "(and, where that still leaves one, once more with the tests of its callees' callees in its own package), "
        "or that planned a batch no forward ran while a forward ran another (a batch built and planned on one "
        "side of a test and the parameter kept on the other meet as one joined object, which has no plan). "
        "A setting the instance keeps (`replan_equivalent=self._replan_after_pad`) is what "
        "the constructor that runs leaves in it (the nearest `__init__`, with what it passes its own helpers), "
        "joined with what its other methods write, where that is a plain value: a literal or a name, logic of "
        "those and of the pack's DP tests (`not require_mlp_sync()`, whose answer the rule knows), or a `partial` "
        "of a planning call read off the instance (`self._plan = partial(self.attn_backend.init_forward_metadata)`, "
        "called later as `self._plan(batch)`). A helper the instance holds, built in one place from a class of "
        "the tree whose methods plan on another object and that defines no plan or forward itself (`self.planner "
        "= DraftBatchPlanner(backend)`), is that object, whose methods run; a function of the tree handed to a "
        "call (`partial(plan_and_mark, backend=...)`) is one the function reaches.",
    ),
    limits=(
        Limit(
            "Only functions that name a planning call and a forward, or a function or method of theirs (one their "
            "class inherits, one of the tree they call, a method of a class of the tree they build) whose text "
            "does, are judged, in files whose text names a planning call, one of the framework's planning methods "
            "the pack lists (`plan_helpers`), the batch's mark (`marks`) or the re-plan predicate: a function that "
            "reaches the plan or the forward only through another object's method is judged where that method's "
            "own text names both, and a file that plans only through a helper of another module, a helper object "
            "it builds or a method its classes inherit, none listed, and marks no batch, is not read."
        ),
        Limit(
            "A forward's decision to plan again is the batch's predicate alone. SGLang 0.5.23's eager runner also "
            "plans a target verify again whatever the mark says (`EagerRunner._execute_extend`), so a target "
            "verify planned and marked ahead of a padding forward is flagged; say so with `# noqa: SG106`."
        ),
        Limit(
            "The batch is judged with DP attention on: a forward (known by the names the pack lists) pads a batch "
            "synchronised across DP ranks before it decides to plan, as SGLang's model runner does, so a function "
            "only ever run without DP attention, where nothing pads the batch, may be flagged; say so with "
            "`# noqa: SG106`. A batch planned and handed on to a caller that forwards it is judged in the caller "
            "where the caller's own text names the plan."
        ),
    ),
    references=(
        "sgl-project/sglang#38580 (open): the EAGLE draft path plans the real batch and marks it ready "
        "(`speculative/eagle_worker_v2.py`, `eagle_worker_common.py`), and `ModelRunner.forward` pads it for DP "
        "attention afterwards without planning again; earlier releases do the same with "
        "`skip_attn_backend_init=True`.",
    ),
)
