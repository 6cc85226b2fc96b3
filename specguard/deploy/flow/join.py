"""How the states of two paths join in the config pre-flight's evaluation: what they disagree on is unknown, and
containers of one shape join item by item. The paths themselves (conditions, outcomes, states, verdicts) are the
evaluator's (`specguard.evaluation.paths`)."""

from __future__ import annotations

from typing import Any

from specguard.evaluation.budget import Budget
from specguard.evaluation.paths import State
from specguard.evaluation.values import UNKNOWN, same_value


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
