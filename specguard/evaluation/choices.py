"""Path by path: the evaluation of one function run again with each undecided test that matters taken one way,
so that values set under tests that depend on each other are not joined before they are compared.

A joined evaluation keeps what each value may be, but loses which options go together: rows expanded under one
test and a bound expanded under another both read as "may be expanded", whether or not a path has one without the
other. `Choices` is consulted at each undecided `if` and conditional expression of the run function's own body
and of the functions it calls directly (`depth`; deeper helpers' paths stay joined), and at each lookup, call a
client answered, or call of a function that raises at one of those, in a `try` that may raise into a handler
(returned, or raised: `RaisePoint`): on the first run it only
notes which tests matter (their two sides leave values of the client's label kinds different); `each_path` then
replays the runs with those tests taken each way, depth first (each run replays the sides taken before its last
new choice)."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from specguard.evaluation.paths import State
from specguard.evaluation.values import Deferred, Label, Obj, Sym, labels_of, place_text, plain
from specguard.program.ast_tools import dotted, walked

T = TypeVar("T")
MAX_PATHS = 32  # the runs `each_path` makes at most; more paths than that are not decided


@dataclass
class Choices:
    """The way each undecided test that matters is taken on this run (`replay`, then False at a new one), and
    which tests matter (noted on a run that takes none: `relevant` None).

    A test taken one way decides the same test again (the same text over the same values, and its parts under
    `not`, `and`, `or`), in this function or one it hands them to, until a name or an attribute it reads is
    assigned: `if not causal: ...` then `if not causal and n > 1: ...` is one path, not two that contradict each
    other. A test that calls something is taken anew each time."""

    kinds: frozenset[str]  # label kinds whose difference between the sides of a test makes it matter
    relevant: set[int] | None = None  # id of each test node that matters; None: this run notes them
    replay: list[bool] = field(default_factory=list)
    taken: list[tuple[ast.expr | RaisePoint, bool]] = field(default_factory=list)
    files: dict[int, str] = field(default_factory=dict)  # id of each test taken -> the file it is written in
    noted: set[int] = field(default_factory=set)
    depth: int = 1  # the calls deep whose tests are taken one way: the run function's (0) and its callees' (1)
    # past its callees, only the tests of this package's own modules are taken one way (a framework's deeper
    # helpers stay joined: a test each call of one takes anew would give paths that contradict each other)
    within: str | None = None
    joining: int = 0  # > 0 while both sides of a test that does not matter run, to be joined: nothing is taken
    # (test text, what its names hold) -> side, names read: a test decides itself again wherever its names hold
    # the same (see `_key`)
    facts: dict[tuple[str, tuple[Any, ...]], tuple[bool, frozenset[str]]] = field(default_factory=dict)
    frames: list[Any] = field(default_factory=list)  # the frames and objects facts are kept for (ids stay theirs)
    kept_kinds: frozenset[str] = frozenset()  # more kinds that matter in what is written on objects (a cache)
    # attributes whose known value written on an object makes a test matter where its sides write it differently
    # (a flag a client's predicate reads, written directly rather than through a labelled call)
    fields: frozenset[str] = frozenset()

    def take(
        self, test: ast.expr, frame: Any, state: State, read: Callable[[ast.expr], bool | None] | None = None
    ) -> bool | None:
        """Which side of `test` this run takes (None: both, joined as usual). `read`: the truth of an operand
        of it that can be read again without running anything, where the evaluation knows it."""
        if self.relevant is None or self.joining:
            return None
        known = self._known(test, frame, state, read)
        if known is not None or id(test) not in self.relevant:
            return known
        side = self.replay[len(self.taken)] if len(self.taken) < len(self.replay) else False
        self.taken.append((test, side))
        self.files[id(test)] = str(frame.module.path)
        self._learn(test, side, frame, state)
        return side

    def known(self, test: ast.expr, frame: Any, state: State) -> bool | None:
        """What this run took `test` to be already (a test it took, or the parts of one), else None."""
        return None if self.relevant is None or self.joining else self._known(test, frame, state)

    def take_outcome(self, node: ast.AST) -> bool | None:
        """Whether, on this run, `node` (a raise point in a `try`: see `RaisePoint`) returned: True, or raised:
        False; None where both are joined as usual. Never a fact: the same call may answer otherwise next time."""
        if self.relevant is None or self.joining or id(node) not in self.relevant:
            return None
        side = self.replay[len(self.taken)] if len(self.taken) < len(self.replay) else False
        self.taken.append((RaisePoint(node), side))
        return side

    def forget(self, name: str, frame: Any, attribute: bool) -> None:
        """`name` was assigned: a local of `frame` (the tests that read it there may now go the other way), or an
        attribute of some object (every test that reads an attribute of that name)."""
        if not self.facts:
            return
        here = id(frame)
        self.facts = {
            key: fact
            for key, fact in self.facts.items()
            if not (name in fact[1] if attribute else (name, "frame", here) in key[1])
        }

    def _key(self, test: ast.expr, frame: Any, state: State) -> tuple[str, tuple[Any, ...]]:
        """A test's text with what each name in it holds: an object or a named unknown by its identity (the same
        in every function it is handed to), anything else as this call's local."""
        parts = []
        for name in sorted({n.id for n in walked(test) if isinstance(n, ast.Name)}):
            held = plain(state.locals.get(name))
            if isinstance(held, Sym):
                parts.append((name, "sym", held.name))
            elif isinstance(held, Obj):
                self.frames.append(held)  # its id stays its own while the fact does
                parts.append((name, "obj", id(held)))
            else:
                self.frames.append(frame)
                parts.append((name, "frame", id(frame)))
        return _canonical(test), tuple(parts)

    def _known(
        self, test: ast.expr, frame: Any, state: State, read: Callable[[ast.expr], bool | None] | None = None
    ) -> bool | None:
        fact = self.facts.get(self._key(test, frame, state))
        if fact is not None:
            return fact[0]
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            known = self._known(test.operand, frame, state, read)
            return None if known is None else not known
        if isinstance(test, ast.BoolOp):
            stop = isinstance(test.op, ast.Or)  # the value that decides the whole
            parts = [self._known(value, frame, state, read) for value in test.values]
            if stop in parts:
                return stop
            return (not stop) if all(part is not None for part in parts) else None
        return read(test) if read is not None else None

    def _learn(self, test: ast.expr, side: bool, frame: Any, state: State) -> None:
        if not _asks_again_alike(test):
            return  # a call may answer otherwise the next time
        names = frozenset(n.id if isinstance(n, ast.Name) else n.attr for n in walked(test) if _named(n))
        self.facts[self._key(test, frame, state)] = (side, names)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self._learn(test.operand, not side, frame, state)
        elif isinstance(test, ast.BoolOp) and side == isinstance(test.op, ast.And):  # all parts went that way
            for value in test.values:
                self._learn(value, side, frame, state)

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
        shape |= {("field", key): _scalar(v) for key, v in state.writes.items() if key[1] in self.fields}
        return {key: labels for key, labels in shape.items() if labels is not None and labels != frozenset()}

    def _labels(self, value: Any, kinds: frozenset[str] | None = None) -> frozenset[Label] | int:
        if isinstance(value, Deferred):
            return id(value)
        return frozenset(x for x in labels_of(value) if x.kind in (kinds or self.kinds))


def _asks_again_alike(test: ast.expr) -> bool:
    """Whether the same test, asked again on this path with its names unchanged, has the same answer: no
    assignment in it, and its calls only a question put to an object with nothing handed
    (`forward_batch.forward_mode.is_decode_or_idle()`), as a mode's or a batch's predicates are."""
    for node in walked(test):
        if isinstance(node, (ast.Await, ast.NamedExpr, ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(node, ast.Call) and (
            node.args or node.keywords or not isinstance(node.func, ast.Attribute) or dotted(node.func) is None
        ):
            return False
    return True


def _canonical(test: ast.expr) -> str:
    """A test's text as its answer depends on it: the operands of `and`/`or` in any order (`a or b` is `b or a`
    where neither runs anything)."""
    if isinstance(test, ast.BoolOp):
        return f"{type(test.op).__name__}({', '.join(sorted(_canonical(v) for v in test.values))})"
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return f"Not({_canonical(test.operand)})"
    return ast.dump(test)


def _scalar(value: Any) -> Any:
    """A written value as a test's sides compare it: a known bool, int or None (as itself), else None."""
    value = plain(value)
    return ("value", value) if isinstance(value, (bool, int, type(None))) else None


def _named(node: ast.AST) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute))


@dataclass(frozen=True)
class RaisePoint:
    """A lookup that may miss, a call a client answered, or a call of a function that raises at one of those, inside
    a `try`, as a path takes it: returned (True) or raised (False). A call the evaluation does not read is none."""

    node: ast.AST


@dataclass
class Path(Generic[T]):
    taken: list[tuple[ast.expr | RaisePoint, bool]]  # each undecided test that matters, and the side this path took
    result: T
    files: dict[int, str] = field(default_factory=dict)  # id of a test taken -> its file, where known

    def describe(self, home: str | None = None) -> str:
        """The path as a message names it: each test and the side taken, each raise point and what it did; a test
        written in another file than `home` (the message's) after that file's name."""
        parts = []
        for test, side in self.taken:
            node = test.node if isinstance(test, RaisePoint) else test
            said = ("returns" if side else "raises") if isinstance(test, RaisePoint) else f"is {str(side).lower()}"
            where = place_text(self.files.get(id(test), home or ""), getattr(node, "lineno", 0), home)
            part = f"`{' '.join(ast.unparse(node).split())}` ({where}) {said}"
            if part not in parts:  # one test met again (a helper called once per layer) is named once
                parts.append(part)
        return " and ".join(parts)


@contextlib.contextmanager
def joined(choices: Choices | None) -> Iterator[None]:
    """While both sides of a test that is not taken one way run, to be joined: nothing in them is taken."""
    if choices is None:
        yield
        return
    choices.joining += 1
    try:
        yield
    finally:
        choices.joining -= 1


def each_path(run: Callable[[Choices], T], noted: Choices, limit: int = MAX_PATHS) -> list[Path[T]] | None:
    """`run` once per path through the tests `noted` (a run that took none) found to matter; None where there
    are more than `limit` paths."""
    paths: list[Path[T]] = []
    replay: list[bool] = []
    while len(paths) <= limit:
        choices = Choices(
            noted.kinds,
            noted.noted,
            replay,
            depth=noted.depth,
            kept_kinds=noted.kept_kinds,
            fields=noted.fields,
            within=noted.within,
        )
        paths.append(Path(choices.taken, run(choices), choices.files))
        sides = [side for _, side in choices.taken]
        # the next path: the last test taken False now taken True, the ones before it as they were
        while sides and sides[-1]:
            sides.pop()
        if not sides:
            return paths
        replay = [*sides[:-1], True]
    return None
