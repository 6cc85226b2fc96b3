"""What a client of the evaluator tells it: which labels are the subject of its question, how a call, an
attribute or an annotation it knows better is answered, and what a reduction over labelled values means.

The evaluator knows Python and nothing of vLLM; a rule (or the config pre-flight) subclasses `Hooks` with the
names from its pack. Every method may answer `NOT_HANDLED` to let the evaluator go on as it would.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from specguard.evaluation.values import NO_LABELS, NOT_HANDLED, Label

if TYPE_CHECKING:
    from specguard.evaluation.evaluator import Evaluator
    from specguard.evaluation.paths import Frame, State


class Hooks:
    # Label kinds whose values the question is about (a CUDA-graph mode, a layer's flag): a test on them that the
    # evaluation cannot decide is a condition its verdicts name, where any other undecided test simply forks.
    subjects: frozenset[str] = frozenset()
    # Label kinds that name a value rather than where it came from (a padded count): a comparison or a truth test of
    # the value does not carry them.
    value_kinds: frozenset[str] = frozenset()
    # Label kinds that mark a capacity, a value no count it bounds exceeds: the smallest of a count and one of them
    # keeps what the count carries, as the smallest of a count and a known number does.
    bound_kinds: frozenset[str] = frozenset()
    # Label kinds whose path (the locals and helpers' returns a value passes through) a message shows.
    traced: frozenset[str] = frozenset()
    # Whether a call the evaluator cannot follow, given a subject, may end the path by raising (the question is
    # whether the code fails): the path goes on under a condition that names the call.
    unresolved_may_raise: bool = False
    # Whether `call` is asked about the function a `functools.partial` reaches, with the partial's arguments before
    # the call's (a client that judges what a call does); otherwise it sees the partial itself (a client that points
    # at the argument the partial bound).
    through_partials: bool = False

    def call(
        self,
        ev: Evaluator,
        func: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        node: ast.Call,
        frame: Frame,
        state: State,
    ) -> Any:
        """A call the client answers itself (a sink it watches, a producer it knows)."""
        return NOT_HANDLED

    def reads(self, ev: Evaluator, func: Any) -> frozenset[str] | None:
        """For a call `call` answers: the keyword arguments it reads (None: every one). The evaluator does not
        evaluate the others where that cannot change anything else (no call in them): a build's count is all SG103
        reads, and the instance attributes its other arguments name are never computed."""
        return None

    def attribute(self, ev: Evaluator, base: Any, attr: str, value: Any, node: ast.AST | None, state: State) -> Any:
        """`base.attr` after the evaluator found `value` for it (UNKNOWN when it knows nothing)."""
        return NOT_HANDLED

    def subscript(self, ev: Evaluator, base: Any, key: Any, node: ast.AST | None) -> Any:
        """`base[key]` (not a slice), before the evaluator takes the item: an index the client knows the meaning
        of (a tensor of rows)."""
        return NOT_HANDLED

    def annotation(self, ev: Evaluator, annotation: ast.expr, frame: Frame) -> Any:
        """The value a name in an annotation (of a parameter, a call's result, a field) stands for, when nothing
        else is known; the evaluator reads the containers, tuples and unions around it, and takes a class of the
        tree for an instance of it."""
        return NOT_HANDLED

    def instance_attribute(self, ev: Evaluator, obj: Any, attr: str) -> Any:
        """What an attribute of an object the client built holds where this evaluation has not written it."""
        return NOT_HANDLED

    def round_ends(self, ev: Evaluator, loop: ast.stmt, frame: Frame, state: State) -> None:
        """A loop's body ran and goes round again (or leaves) from `state`: what the client's values mean may
        have changed with the round (lengths a draft step prepared are the previous step's on the next one), so
        it may relabel them in `state`."""

    def rounded(self, ev: Evaluator, value: Any, divisor: str) -> frozenset[Label]:
        """Labels a multiple of `divisor` adds to itself where it was computed from a quotient by that divisor
        (`(n + a - 1) // a * a`, `cdiv(n, a) * a`: a count rounded to a multiple, not the count itself)."""
        return NO_LABELS

    def divided(self, ev: Evaluator, value: Any, divisor: str) -> frozenset[Label]:
        """Labels a quotient by `divisor` adds to itself (lengths spread over that many ranks divided by their
        number: one rank's share, however the function works it out)."""
        return NO_LABELS

    def at_least(self, ev: Evaluator, value: Any, bound: Any, node: ast.AST) -> frozenset[Label]:
        """Labels an element adds to itself where it was chosen for being at least `bound` (`next(s for s in sizes
        if s >= n)`, `min(...)` of such): it may be larger than `bound`, whatever the collection is called."""
        return NO_LABELS

    def reduced(self, ev: Evaluator, name: str, inputs: list[Any], node: ast.AST | None) -> frozenset[Label]:
        """Labels a reduction (`any`, `max`, `sum`, `.max()`, `functools.reduce`, ...) adds to its result."""
        return NO_LABELS
