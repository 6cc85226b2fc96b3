"""Path by path: the evaluation of one function run again with each undecided test that matters taken one way,
so that values set under tests that depend on each other are not joined before they are compared.

A joined evaluation keeps what each value may be, but loses which options go together: rows expanded under one
test and a bound expanded under another both read as "may be expanded", whether or not a path has one without the
other. `Choices` is consulted at each undecided `if` and conditional expression of the run function's own body
and of the functions it calls directly (`depth`; deeper helpers' paths stay joined): on the first run it only
notes which tests matter (their two sides leave values of the client's label kinds different); `each_path` then
replays the runs with those tests taken each way, depth first (each run replays the sides taken before its last
new choice)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from specguard.evaluation.paths import State
from specguard.evaluation.values import Deferred, Label, labels_of

T = TypeVar("T")


@dataclass
class Choices:
    """The way each undecided test that matters is taken on this run (`replay`, then False at a new one), and
    which tests matter (noted on a run that takes none: `relevant` None).

    A test taken one way decides the same test again (the same text, and its parts under `not`, `and`, `or`)
    until a name or an attribute it reads is assigned: `if not causal: ...` then `if not causal and n > 1: ...`
    is one path, not two that contradict each other."""

    kinds: frozenset[str]  # label kinds whose difference between the sides of a test makes it matter
    relevant: set[int] | None = None  # id of each test node that matters; None: this run notes them
    replay: list[bool] = field(default_factory=list)
    taken: list[tuple[ast.expr, bool]] = field(default_factory=list)
    noted: set[int] = field(default_factory=set)
    depth: int = 1  # the calls deep whose tests are taken one way: the run function's (0) and its callees' (1)
    joining: int = 0  # > 0 while both sides of a test that does not matter run, to be joined: nothing is taken
    # (scope, test text) -> side, names read: a test decides itself again in the same call (the scope is the id of
    # its frame), or on the same instance where it reads only the instance's attributes (("self", id of it))
    facts: dict[tuple[Any, str], tuple[bool, frozenset[str]]] = field(default_factory=dict)
    frames: list[Any] = field(default_factory=list)  # the frames and instances facts are kept for (ids stay theirs)
    kept_kinds: frozenset[str] = frozenset()  # more kinds that matter in what is written on objects (a cache)

    def take(self, test: ast.expr, frame: Any, me: Any = None) -> bool | None:
        """Which side of `test` this run takes (None: both, joined as usual). `me`: the instance the frame's
        method runs on, whose attributes' tests (`self.size > 1`) are one test in every method it runs."""
        if self.relevant is None or self.joining:
            return None
        scope = _scope(test, frame, me)
        known = self._known(test, scope)
        if known is not None or id(test) not in self.relevant:
            return known
        side = self.replay[len(self.taken)] if len(self.taken) < len(self.replay) else False
        self.taken.append((test, side))
        self.frames += [frame, me]
        self._learn(test, side, scope)
        return side

    def forget(self, name: str, frame: Any) -> None:
        """`name` (a local or an attribute) was assigned: the tests that read it may now go the other way (in this
        call, and on any instance)."""
        if self.facts:
            here = id(frame)
            self.facts = {
                key: fact
                for key, fact in self.facts.items()
                if name not in fact[1] or (key[0] != here and not isinstance(key[0], tuple))
            }

    def _known(self, test: ast.expr, frame: Any) -> bool | None:
        fact = self.facts.get((frame, _text(test)))
        if fact is not None:
            return fact[0]
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            known = self._known(test.operand, frame)
            return None if known is None else not known
        if isinstance(test, ast.BoolOp):
            stop = isinstance(test.op, ast.Or)  # the value that decides the whole
            parts = [self._known(value, frame) for value in test.values]
            if stop in parts:
                return stop
            return (not stop) if all(part is not None for part in parts) else None
        return None

    def _learn(self, test: ast.expr, side: bool, frame: Any) -> None:
        names = frozenset(n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(test) if _named(n))
        self.facts[(frame, _text(test))] = (side, names)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self._learn(test.operand, not side, frame)
        elif isinstance(test, ast.BoolOp) and side == isinstance(test.op, ast.And):  # all parts went that way
            for value in test.values:
                self._learn(value, side, frame)

    def note_states(self, test: ast.expr, yes: State | None, no: State | None) -> None:
        """On the noting run: a test matters when its sides leave some value with other labels of the kinds."""
        if self.relevant is None and self._shape(yes) != self._shape(no):
            self.noted.add(id(test))

    def note_values(self, test: ast.expr, yes: Any, no: Any) -> None:
        if self.relevant is None and self._labels(yes) != self._labels(no):
            self.noted.add(id(test))

    def _shape(self, state: State | None) -> Any:
        if state is None:
            return None
        kept = self.kinds | self.kept_kinds
        shape = {("local", k): self._labels(v, self.kinds) for k, v in state.locals.items()}
        shape |= {key: self._labels(v, kept) for key, v in state.writes.items()}
        return {key: labels for key, labels in shape.items() if labels}

    def _labels(self, value: Any, kinds: frozenset[str] | None = None) -> frozenset[Label] | int:
        if isinstance(value, Deferred):
            return id(value)
        return frozenset(x for x in labels_of(value) if x.kind in (kinds or self.kinds))


def _scope(test: ast.expr, frame: Any, me: Any) -> Any:
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    return ("self", id(me)) if me is not None and names == {"self"} else id(frame)


def _text(test: ast.expr) -> str:
    return ast.dump(test)


def _named(node: ast.AST) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute))


@dataclass
class Path(Generic[T]):
    taken: list[tuple[ast.expr, bool]]  # each undecided test that matters, and the side this path took
    result: T

    def describe(self) -> str:
        """The path as a message names it: each test and the side taken."""
        return " and ".join(
            f"`{' '.join(ast.unparse(test).split())}` is {'true' if side else 'false'}" for test, side in self.taken
        )


def each_path(run: Callable[[Choices], T], noted: Choices, limit: int) -> list[Path[T]] | None:
    """`run` once per path through the tests `noted` (a run that took none) found to matter; None where there
    are more than `limit` paths."""
    paths: list[Path[T]] = []
    replay: list[bool] = []
    while len(paths) <= limit:
        choices = Choices(noted.kinds, noted.noted, replay, depth=noted.depth, kept_kinds=noted.kept_kinds)
        paths.append(Path(choices.taken, run(choices)))
        sides = [side for _, side in choices.taken]
        # the next path: the last test taken False now taken True, the ones before it as they were
        while sides and sides[-1]:
            sides.pop()
        if not sides:
            return paths
        replay = [*sides[:-1], True]
    return None
