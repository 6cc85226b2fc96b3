"""Paths through evaluated code: the undecided conditions (Cond) a statement is reached under, what is recorded
(Outcome), the evaluation state, and the verdict over outcomes (certain, impossible, or undecided with why)."""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard.deploy.flow.values import UNKNOWN, same_value
from specguard.deploy.source import ClassInfo, ParsedModule


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
    kind: str  # raise | assert | warning | assign | call
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

    def copy(self, path: frozenset | None = None) -> State:
        return State(dict(self.locals), dict(self.writes), self.path if path is None else path)


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


def merge(states: list[State]) -> State | None:
    """One state for paths that join again: values they disagree on become UNKNOWN."""
    if not states:
        return None
    if len(states) == 1:
        return states[0]
    out = State({}, {}, frozenset.intersection(*(s.path for s in states)))
    for attr in ("locals", "writes"):
        target = getattr(out, attr)
        keys = set().union(*(getattr(s, attr).keys() for s in states))
        for key in keys:
            values = [getattr(s, attr).get(key, UNKNOWN) for s in states]
            target[key] = values[0] if all(same_value(values[0], v) for v in values[1:]) else UNKNOWN
    return out


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
