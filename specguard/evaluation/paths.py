"""Paths through evaluated code: the undecided conditions (Cond) a statement is reached under, what is recorded
(Outcome), the evaluation state and how the states of two paths join, and the verdict over outcomes (certain,
impossible, or undecided with why)."""

from __future__ import annotations

import ast
import itertools
from collections import ChainMap
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard.evaluation.budget import Budget
from specguard.evaluation.values import (
    MAX_OPTIONS,
    NO_LABELS,
    UNKNOWN,
    Abstract,
    Bound,
    Deferred,
    Function,
    Label,
    Many,
    Mapping,
    Obj,
    OneOf,
    Partial,
    Sym,
    bounded,
    labels_of,
    maybe_of,
    one_of,
    plain,
    same_value,
    settled,
    why_of,
)
from specguard.program.tree import ClassInfo, ParsedModule

MAX_JOINED_FIELDS = 64  # objects with more known fields than this join to an unknown


@dataclass(frozen=True, eq=False)
class Cond:
    """A test the evaluation does not decide and that a verdict depends on; it names the reason a verdict is not
    certain."""

    node: ast.AST
    file: Path
    relpath: str
    kind: str = "test"  # "test": a value's truth; "call": whether a call the evaluation cannot read returns

    @property
    def text(self) -> str:
        return " ".join(ast.unparse(self.node).split())

    def describe(self) -> str:
        return f"`{self.text}` ({self.relpath}:{getattr(self.node, 'lineno', 0)})"

    def outcome(self, polarity: bool) -> str:
        if self.kind == "call":
            return "returns" if polarity else "raises"
        return "is true" if polarity else "is false"


@dataclass(frozen=True, eq=False)
class Site:
    kind: str  # raise | assert | warning | assign | call | construct | return
    module: ParsedModule
    node: ast.AST
    message: str

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)


@dataclass
class Outcome:
    site: Site
    path: frozenset
    detail: Any = None
    caught: bool = False  # a raise an enclosing `except` catches: no failure


@dataclass
class State:
    locals: dict[str, Any]
    writes: dict[tuple[Any, str], Any]
    path: frozenset
    # local name -> the environment's variables its value was computed from (see `environment`)
    env: dict[str, frozenset[str]] = field(default_factory=dict)
    # on a path that ends in a raise: the names of the class raised and of its bases (None: not known)
    raised: set[str] | None = None
    # whether that raise is one a path-by-path run may take apart (a lookup's miss, a call a client answered)
    at_point: bool = False

    def copy(self, path: frozenset | None = None, budget: Budget | None = None) -> State:
        """A state for another path. With a budget, the containers it holds are copied too (charged to it), so what
        one path appends to a list the other does not see (two names of one list stay one list)."""
        path = self.path if path is None else path
        if budget is None:
            return State(dict(self.locals), dict(self.writes), path, dict(self.env))
        copies: dict[int, Any] = {}
        locals_ = {k: _own(v, copies) for k, v in self.locals.items()}
        writes = {k: _own(v, copies) for k, v in self.writes.items()}
        if copies:
            budget.spend(sum(len(c) + 1 for c in copies.values()))
        return State(locals_, writes, path, dict(self.env))


def _own(value: Any, copies: dict[int, Any]) -> Any:
    """`value` with every list, dict and set in it copied (what they hold otherwise shared), each once."""
    if not isinstance(value, (list, dict, set, tuple)):
        return value
    found = copies.get(id(value))
    if found is not None:
        return found
    if isinstance(value, dict):
        out: Any = {}
        copies[id(value)] = out
        for k, v in value.items():
            out[k] = _own(v, copies)
    elif isinstance(value, list):
        out = []
        copies[id(value)] = out
        out.extend(_own(v, copies) for v in value)
    elif isinstance(value, set):
        out = set(value)  # set members are hashable: no list or dict in them
        copies[id(value)] = out
    else:  # a tuple is not mutable, but may hold what is
        items = [_own(v, copies) for v in value]
        out = value if all(a is b for a, b in zip(items, value, strict=True)) else tuple(items)
        copies[id(value)] = out
    return out


@dataclass
class Flow:
    normal: State | None = None
    returns: list[tuple[State, Any]] = field(default_factory=list)
    breaks: list[State] = field(default_factory=list)
    continues: list[State] = field(default_factory=list)
    raises: list[State] = field(default_factory=list)


def chain(first: Flow, second: Flow) -> Flow:
    """One flow after another: the second goes on from where the first goes on normally."""
    return Flow(
        normal=second.normal,
        returns=first.returns + second.returns,
        breaks=first.breaks + second.breaks,
        continues=first.continues + second.continues,
        raises=first.raises + second.raises,
    )


@dataclass
class Frame:
    module: ParsedModule
    owner: ClassInfo | None
    closure: MutableMapping[str, Any] | None
    depth: int


def enclosing(frame: Frame, names: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """What a function defined in `frame` sees of the scopes around it: `names` (the defining function's locals),
    then what that function itself saw (a lambda in a lambda sees the outer function's locals too)."""
    return names if frame.closure is None else ChainMap(names, frame.closure)  # type: ignore[arg-type]


def doubts(path: frozenset) -> tuple[str, ...]:
    """The undecided tests a path passes, as a verdict names them."""
    return tuple(sorted(f"whether {cond.describe()} {cond.outcome(polarity)}" for cond, polarity in path))


def join_values(options: list[tuple[Any, frozenset]]) -> Any:
    """One value for a variable that paths set differently: (value, the undecided tests only its path passed).

    Labels of a value reached only under undecided tests become `maybe` labels, with the tests as the reason:
    the value may be that one, depending on what could not be decided."""
    first = options[0][0]
    if all(same_value(first, value) for value, _ in options[1:]):
        return first
    if any(isinstance(value, Deferred) for value, _ in options):  # joined when read, as each option is
        return Deferred(lambda: join_values([(settled(value), extra) for value, extra in options]))
    if all(isinstance(value, Obj) for value, _ in options) and _same_class(options):
        return _join_objects(options)
    union = _union_of_objects(options)
    if union is not None:
        return union
    containers = _join_containers(options)
    if containers is not None:
        return containers
    if all(isinstance(value, Many) for value, _ in options):
        return Many(join_values([(value.element, extra) for value, extra in options]))
    if not any(extra for _, extra in options):
        scalars = one_of([value for value, _ in options])
        if scalars is not None:
            return scalars
    labels: frozenset[Label] = NO_LABELS
    maybe: frozenset[Label] = NO_LABELS
    why: tuple[str, ...] = ()
    for value, extra in options:
        if extra:
            maybe = maybe | labels_of(value)
            if labels_of(value) or maybe_of(value):
                why = why + tuple(f"depends on {d}" for d in doubts(extra) if f"depends on {d}" not in why)
        else:
            labels = labels | labels_of(value)
        maybe = maybe | maybe_of(value)
        why = why + tuple(r for r in why_of(value) if r not in why)
    lengths = [value.length for value, _ in options if isinstance(value, Abstract)]
    length = lengths[0] if len(lengths) == len(options) and all(same_value(lengths[0], x) for x in lengths) else None
    # an instance of a class, or None (`d.get(k)`, `x if c else None`): used as one where a method is called on it
    typed = [value for value, _ in options if plain(value) is not None]
    kinds = {value.kind for value in typed if isinstance(value, Abstract)}
    kind = kinds.pop() if len(kinds) == 1 and all(isinstance(v, Abstract) for v in typed) else None
    exists = all(isinstance(value, Abstract) and value.exists for value, _ in options)
    if not (labels or maybe) and length is None and kind is None:
        return UNKNOWN
    return Abstract(bounded(labels), bounded(maybe - labels), why[:4], length, kind, exists=exists)


def _join_containers(options: list[tuple[Any, frozenset]]) -> Any:
    """Dicts, lists or tuples that paths filled differently (each path holds its own): joined item by item, where
    they have the same keys or length; a dict with keys only some paths set holds each joined with what the others
    left there (unknown)."""
    values = [value for value, _ in options]
    paths = [extra for _, extra in options]
    if all(isinstance(v, (dict, Mapping)) for v in values) and any(isinstance(v, Mapping) for v in values):
        # dicts of unknown keys, or known dicts: one of unknown keys holding what any of them holds
        keys = [(k, p) for v, p in zip(values, paths, strict=True) for k in ([v.key] if isinstance(v, Mapping) else v)]
        items = [
            (x, p)
            for v, p in zip(values, paths, strict=True)
            for x in ([v.value] if isinstance(v, Mapping) else v.values())
        ]
        return Mapping(join_values(keys), join_values(items))  # a Mapping among them: neither list is empty
    if all(isinstance(v, dict) for v in values):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return {k: join_values([(v.get(k, UNKNOWN), p) for v, p in zip(values, paths, strict=True)]) for k in keys}
    for kind in (list, tuple):
        if all(type(v) is kind for v in values) and len({len(v) for v in values}) == 1:
            columns = zip(*values, strict=True)
            return kind(join_values(list(zip(column, paths, strict=True))) for column in columns)
    return None


def _union_of_objects(options: list[tuple[Any, frozenset]]) -> OneOf | None:
    """Objects of a few classes or callables (a function, a bound method, a partial), perhaps None (`self.desc =
    None` in `__init__`, set by another method; a builder picked from a dict by a key): one of them, each kept
    with its fields (those of one class joined), not an unknown that forgets them. Where one is None, what is
    read from it or called on it is the others' (reading an attribute of None, or calling it, raises)."""
    objects: dict[Any, list[tuple[Any, frozenset]]] = {}
    has_none = False
    # a union among them (an attribute that is None or an object, joined again with the object) is its options
    flat = [
        (option, extra)
        for value, extra in options
        for option in (value.options if isinstance(value, OneOf) else (value,))
    ]
    for value, extra in flat:
        if plain(value) is None:
            has_none = True
        elif isinstance(value, Obj):
            objects.setdefault(value.cls, []).append((value, extra))
        elif isinstance(value, (Function, Bound, Partial, Sym)):
            objects.setdefault(id(value), []).append((value, extra))
        else:
            return None
    if not objects or len(objects) + has_none > MAX_OPTIONS:
        return None
    joined = [group[0][0] if len(group) == 1 else join_values(group) for group in objects.values()]
    # a member known only by its name is one of them beside a callable (`run = partial(runner.forward, ...)` on one
    # path, `runner.forward` on the other), not beside objects, which it would stand for no better than an unknown
    if any(isinstance(x, Sym) for x in joined) and not any(isinstance(x, (Function, Bound, Partial)) for x in joined):
        return None
    if not all(isinstance(x, (Obj, Function, Bound, Partial, Sym)) for x in joined):
        return None
    return OneOf(((None,) if has_none else ()) + tuple(joined))


def _same_class(options: list[tuple[Any, frozenset]]) -> bool:
    first = options[0][0]
    return all(value.cls == first.cls for value, _ in options) and all(
        len(value.fields) <= MAX_JOINED_FIELDS for value, _ in options
    )


def _join_objects(options: list[tuple[Any, frozenset]]) -> Obj:
    first: Obj = options[0][0]
    names = set().union(*(value.fields for value, _ in options))
    fields = {}
    for name in names:
        fields[name] = join_values([(value.fields.get(name, UNKNOWN), extra) for value, extra in options])
    labels = frozenset().union(*(value.labels for value, _ in options))
    held = any(value.held for value, _ in options)
    return Obj(first.cls, fields, first.defaults, first.label, first.pinned, labels, dict(first.nodes), held)


def merge(states: list[State], kept: int | None = None) -> State | None:
    """One state for paths that join again: values they disagree on are joined (see join_values). `kept`: the id
    of an object (a writer run's instance) whose attributes written on only some of the paths keep the values
    written: the other paths leave them as they were, which whoever reads the attribute joins in anyway."""
    if not states:
        return None
    if len(states) == 1:
        return states[0]
    common = frozenset.intersection(*(s.path for s in states))
    out = State({}, {}, common)
    for attr in ("locals", "writes"):
        target = getattr(out, attr)
        keys = set().union(*(getattr(s, attr).keys() for s in states))
        for key in keys:
            tables = [(getattr(s, attr), s.path - common) for s in states]
            if attr == "writes" and kept is not None and key[0] == kept:
                tables = [(table, path) for table, path in tables if key in table]
            target[key] = join_values([(table.get(key, UNKNOWN), path) for table, path in tables])
    return out


def take_writes(state: State, end: State | None) -> None:
    """What code run on a state of its own (a callee, a comprehension) left in the objects it was handed, as
    `state`'s from now on."""
    assert end is not None
    if end.writes is not state.writes:  # one way out shares the caller's writes: clearing would lose them
        state.writes.clear()
        state.writes.update(end.writes)


def merge_agreed(states: list[State], budget: Budget | None = None) -> State | None:
    """One state for paths that join again, keeping only what they agree on (`Semantics.join == "unknown"`): values
    they disagree on become UNKNOWN, containers of one shape join item by item, and the variables of the serving
    environment each local was computed from are united. The containers joined are charged to `budget`."""
    if not states:
        return None
    if len(states) == 1:
        return states[0]
    out = State({}, {}, frozenset.intersection(*(s.path for s in states)))
    for s in states:
        for name, names in s.env.items():
            out.env[name] = out.env.get(name, frozenset()) | names
    merged: dict[tuple[int, ...], Any] = {}
    for attr in ("locals", "writes"):
        target = getattr(out, attr)
        keys = set().union(*(getattr(s, attr).keys() for s in states))
        for key in keys:
            target[key] = _agreed([getattr(s, attr).get(key, UNKNOWN) for s in states], merged)
    if budget is not None and merged:
        budget.spend(sum(len(v) + 1 if isinstance(v, (dict, list)) else 1 for v in merged.values()))
    return out


def _agreed(values: list[Any], merged: dict[tuple[int, ...], Any]) -> Any:
    """One value for what paths that join hold: the value they agree on; containers of the same shape (each path
    holds its own copy, see `State.copy`) joined item by item, each once; UNKNOWN where they disagree."""
    first = values[0]
    if all(v is first for v in values[1:]):
        return first
    key = tuple(id(v) for v in values)
    if key in merged:
        return merged[key]
    if all(type(v) is dict for v in values) and all(v.keys() == first.keys() for v in values[1:]):
        out: Any = {}
        merged[key] = out
        for k in first:
            out[k] = _agreed([v[k] for v in values], merged)
        return out
    if all(type(v) is list for v in values) and all(len(v) == len(first) for v in values[1:]):
        items: list[Any] = []
        merged[key] = items
        items.extend(_agreed([v[i] for v in values], merged) for i in range(len(first)))
        return items
    result = first if all(same_value(first, v) for v in values[1:]) else UNKNOWN
    merged[key] = result
    return result


@dataclass
class Verdict:
    """Whether a set of outcomes happens: True, False, or UNKNOWN with the conditions why."""

    value: Any
    outcomes: list[Outcome]
    conditions: list[Cond] = field(default_factory=list)

    @property
    def certain(self) -> bool:
        return self.value is True

    def reasons(self, limit: int = 3) -> str:
        shown = [c.describe() for c in self.conditions[:limit]]
        more = len(self.conditions) - limit
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def verdict(outcomes: list[Outcome]) -> Verdict:
    """True if some outcome happens whatever the undecided conditions are, UNKNOWN if some may, else False."""
    live = [o for o in outcomes if not o.caught and not contradictory(o.path)]
    if not live:
        return Verdict(False, [])
    certain = [o for o in live if not o.path]
    if certain:
        return Verdict(True, certain)
    conds: list[Cond] = []
    for o in live:
        for cond, _ in sorted(o.path, key=lambda item: (item[0].relpath, getattr(item[0].node, "lineno", 0))):
            if cond not in conds:
                conds.append(cond)
    if len(conds) <= 12 and _covers(live, conds):
        return Verdict(True, live)
    return Verdict(UNKNOWN, live, conds)


def contradictory(path: frozenset) -> bool:
    seen: dict[Cond, bool] = {}
    for cond, polarity in path:
        if seen.get(cond, polarity) != polarity:
            return True
        seen[cond] = polarity
    return False


def _covers(outcomes: list[Outcome], conds: list[Cond]) -> bool:
    """Every assignment of the undecided conditions satisfies some outcome's path (their union is certain)."""
    for values in itertools.product((True, False), repeat=len(conds)):
        assignment = dict(zip(conds, values, strict=True))
        if not any(all(assignment[c] == p for c, p in o.path) for o in outcomes):
            return False
    return True


class PathEnds(Exception):
    """The statement being evaluated raises on every path (a call whose every path raised, an unpacking of the
    wrong length): its path ends there, as a raise an enclosing `try` may catch. `raised`: the names of what it
    raises and of its bases, where known."""

    def __init__(self, raised: set[str] | None = None) -> None:
        super().__init__()
        self.raised = raised
