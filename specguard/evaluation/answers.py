"""Questions a path answered (`batch.forward_mode.is_idle()`, asked with no argument), and what an `or` that held
over several of them still says once all but one are answered.

A path that passed `if not (mode.is_draft_extend() or mode.is_idle()): raise` knows that one of the two holds, not
which; once a later test says `mode.is_idle()` is False, the other is True. Each answer is kept in the path's
writes under the question's `answer_key`; the open disjunctions are kept beside them under one key, so that an
answer finds them at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specguard.evaluation.paths import State

_PENDING = (0, "|pending")  # the writes key of a path's open disjunctions (no object's id is 0)


@dataclass(frozen=True)
class _OneOfThem:
    """Questions of which at least one answers `truth` (an `or` that held: True; an `and` that failed: False)."""

    asked: tuple[Any, ...]
    truth: bool


def answer(state: State, asked: Any, truth: bool) -> None:
    """Record that `asked` answers `truth` on this path, and what that settles of its open disjunctions."""
    state.writes[asked] = truth
    pending = state.writes.get(_PENDING)
    if not isinstance(pending, tuple) or not any(asked in clause.asked for clause in pending):
        return
    still: list[_OneOfThem] = []
    settled: list[tuple[Any, bool]] = []
    for clause in pending:
        if asked not in clause.asked:
            still.append(clause)
        elif truth != clause.truth:  # not this one: one of the others
            rest = tuple(other for other in clause.asked if other != asked)
            if len(rest) == 1:
                settled.append((rest[0], clause.truth))
            else:
                still.append(_OneOfThem(rest, clause.truth))
    state.writes[_PENDING] = tuple(still)
    for other, other_truth in settled:
        if state.writes.get(other) is None:
            answer(state, other, other_truth)


def one_of_them(state: State, asked: list[Any], truth: bool) -> None:
    """Record that at least one of the questions `asked`, none answered yet on this path, answers `truth`."""
    pending = state.writes.get(_PENDING)
    clauses = pending if isinstance(pending, tuple) else ()
    state.writes[_PENDING] = (*clauses, _OneOfThem(tuple(asked), truth))
