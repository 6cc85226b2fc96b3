"""Paths through evaluated code: the undecided conditions (Cond) a statement is reached under, what is recorded
(Outcome), the evaluation state, and the verdict over outcomes (certain, impossible, or undecided with why)."""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard.deploy.source import ClassInfo, ParsedModule
from specguard.evaluation.budget import Budget
from specguard.evaluation.values import UNKNOWN, same_value


@dataclass(frozen=True, eq=False)
class Cond:
    """A test the serving config does not decide; it names the reason a verdict is not certain."""

    node: ast.AST
    file: Path
    relpath: str

    @property
    def text(self) -> str:
        return " ".join(ast.unparse(self.node).split())

    def describe(self) -> str:
        return f"`{self.text}` ({self.relpath}:{getattr(self.node, 'lineno', 0)})"


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
    writes: dict[tuple[int, str], Any]
    path: frozenset
    # local name -> the serving environment's variables its value was computed from (see `environment`)
    env: dict[str, frozenset[str]] = field(default_factory=dict)

    def copy(self, path: frozenset | None = None, budget: Budget | None = None) -> State:
        """A state for another path: the containers it holds are copied too, so what one path appends to a list
        the other does not see (two names of one list stay one list). The copies are charged to `budget`."""
        copies: dict[int, Any] = {}
        locals_ = {k: _own(v, copies) for k, v in self.locals.items()}
        writes = {k: _own(v, copies) for k, v in self.writes.items()}
        if budget is not None and copies:
            budget.spend(sum(len(c) + 1 for c in copies.values()))
        return State(locals_, writes, self.path if path is None else path, dict(self.env))


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


@dataclass
class Frame:
    module: ParsedModule
    owner: ClassInfo | None
    closure: dict[str, Any] | None
    depth: int


def merge(states: list[State], budget: Budget | None = None) -> State | None:
    """One state for paths that join again: values they disagree on become UNKNOWN. The containers joined item by
    item are charged to `budget`."""
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
            target[key] = _joined([getattr(s, attr).get(key, UNKNOWN) for s in states], merged)
    if budget is not None and merged:
        budget.spend(sum(len(v) + 1 if isinstance(v, (dict, list)) else 1 for v in merged.values()))
    return out


def _joined(values: list[Any], merged: dict[tuple[int, ...], Any]) -> Any:
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
            out[k] = _joined([v[k] for v in values], merged)
        return out
    if all(type(v) is list for v in values) and all(len(v) == len(first) for v in values[1:]):
        items: list[Any] = []
        merged[key] = items
        items.extend(_joined([v[i] for v in values], merged) for i in range(len(first)))
        return items
    result = first if all(same_value(first, v) for v in values[1:]) else UNKNOWN
    merged[key] = result
    return result


@dataclass
class Verdict:
    """Whether a set of outcomes happens for the config: True, False, or UNKNOWN with the conditions why."""

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
    live = [o for o in outcomes if not o.caught and not _contradictory(o.path)]
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


def _contradictory(path: frozenset) -> bool:
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
