"""What an evaluation may spend: steps (statements and expressions evaluated) and work (elements a builtin, a
method or an operator touches or builds), per evaluation and per run, and the largest value it may build.

The served source is data: a comprehension over a long string, `s.replace("a", s)`, `"".join([s] * n)`, `s = s + s`
in a loop or `x = x * x` must cost a "not judged: too costly to evaluate", never the machine's memory or minutes of
CPU. Each operation states the size of what it will build *before* building it: a value larger than `MAX_ITEMS`
elements (characters, items) or `MAX_INT_BITS` bits is not built (the result is unknown), and everything built or
touched is charged, so many small values cannot add up to a large cost either.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import re
from collections.abc import Iterator
from typing import Any

# The largest single value: far above anything vLLM's config code builds (its help texts, option lists, dicts of a
# few hundred entries), far below harm.
MAX_ITEMS = 100_000
MAX_INT_BITS = 1 << 14
# Per evaluation (one function run with its callees) and per run (every evaluation of one `specguard config`).
EVALUATION_STEPS = 400_000
EVALUATION_WORK = 20_000_000
RUN_STEPS = 3_000_000
RUN_WORK = 60_000_000
# An evaluation given a number of steps (the rules' of `specguard check`, a function and its callees) may do this
# much work with them; the evaluations of one file `specguard check` judges share FILE_STEPS and FILE_WORK, so a
# file of many functions that each spend their own budget stops at a few seconds (a step or an element costs about
# a microsecond). The costliest file of vLLM 0.22-0.33 takes under 7,000 steps and 200 elements.
RULES_WORK = 2_000_000
FILE_STEPS = 1_000_000
FILE_WORK = 5_000_000


class OutOfBudget(Exception):
    """The evaluation would cost more than it may; what depended on it is "not judged: too costly to evaluate"."""


class Budget:
    """Steps and work left; a child charges its parent too, so a run's evaluations share the run's budget."""

    def __init__(self, steps: int, work: int, parent: Budget | None = None, what: str = "evaluation") -> None:
        self.steps = steps
        self.work = work
        self.parent = parent
        self.what = what

    def step(self, n: int = 1) -> None:
        self.steps -= n
        if self.steps < 0:
            raise OutOfBudget(f"the {self.what} took more than its steps")
        if self.parent is not None:
            self.parent.step(n)

    def spend(self, units: int) -> None:
        self.work -= units
        if self.work < 0:
            raise OutOfBudget(f"the {self.what} built or touched too much data")
        if self.parent is not None:
            self.parent.spend(units)


_RUN: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("specguard_run_budget", default=None)


@contextlib.contextmanager
def run_budget(steps: int = RUN_STEPS, work: int = RUN_WORK) -> Iterator[Budget]:
    """Every evaluation inside shares one budget (the outermost one, if runs nest)."""
    current = _RUN.get()
    if current is not None:
        yield current
        return
    budget = Budget(steps, work, what="run")
    token = _RUN.set(budget)
    try:
        yield budget
    finally:
        _RUN.reset(token)


def evaluation_budget(steps: int = EVALUATION_STEPS, work: int = EVALUATION_WORK) -> Budget:
    return Budget(steps, work, parent=_RUN.get())


def size(value: Any) -> int:
    """What a value costs to hold or walk once, shallowly: characters, items, or 64-bit words of an integer."""
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int):
        return value.bit_length() // 64 + 1
    if isinstance(value, (str, bytes, list, tuple, set, frozenset, dict)):
        return len(value) + 1
    return 1


def too_large(value_size: int) -> bool:
    return value_size > MAX_ITEMS


def deep_size(value: Any, limit: int = MAX_ITEMS + 1) -> int:
    """Characters `str()`/`repr()` of a value may produce, counted until `limit` (an estimate from above)."""
    total = 0
    stack = [value]
    while stack and total < limit:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item) + 2
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 2
        elif isinstance(item, dict):
            total += 2 * len(item) + 2
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 2 * len(item) + 2
            stack.extend(item)
        else:
            total += 32
    return total


_MAX_EXPONENT = 256
_WIDE_PRINTF = re.compile(r"%[-+ #0]*(?:\*|\d{6,})")
_SEQUENCES = (str, tuple, list)


def result_size(op: ast.operator, left: Any, right: Any) -> int | None:
    """The size of `left <op> right` before computing it (see `budget.size`), or None where it would be too large
    (or too slow: a huge power, a printf field a million wide)."""
    ints = isinstance(left, int) and isinstance(right, int)
    if isinstance(op, ast.Pow):
        numbers = isinstance(left, (int, float)) and isinstance(right, (int, float))
        if not numbers or abs(right) > _MAX_EXPONENT or abs(left) > 2**64:
            return None
        bits = max(abs(int(left)), 2).bit_length() * max(int(right), 1) if ints else 64
        return bits // 64 + 1 if bits <= MAX_INT_BITS else None
    if isinstance(op, ast.Mult):
        if ints:
            bits = abs(left).bit_length() + abs(right).bit_length()
            return bits // 64 + 1 if bits <= MAX_INT_BITS else None
        seq, count = (left, right) if isinstance(left, _SEQUENCES) else (right, left)
        if isinstance(seq, _SEQUENCES) and isinstance(count, int):
            items = max(count, 0) * len(seq)
            return items + 1 if not too_large(items) else None
        return 1
    if isinstance(op, ast.Add) and isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
        items = len(left) + len(right)
        return items + 1 if not too_large(items) else None
    if isinstance(op, (ast.BitOr, ast.BitAnd)) and not ints and hasattr(left, "__len__") and hasattr(right, "__len__"):
        items = len(left) + len(right)
        return items + 1 if not too_large(items) else None
    if isinstance(op, ast.Mod) and isinstance(left, str):
        if _WIDE_PRINTF.search(left):
            return None
        chars = len(left) + (left.count("%") + 1) * deep_size(right)  # `%(a)s` may insert one value many times
        return chars + 1 if not too_large(chars) else None
    if ints:  # +, -, //, %, |, &: no larger than the larger operand and a bit
        bits = max(abs(left).bit_length(), abs(right).bit_length()) + 1
        return bits // 64 + 1 if bits <= MAX_INT_BITS else None
    return 1


def method_result_size(target: Any, name: str, args: list[Any], kwargs: dict[str, Any]) -> int:
    """How large the result of a whitelisted str/list/dict/set method may be (see `size`), before calling it."""
    if isinstance(target, str):
        if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            old, new = args[0], args[1]
            count = target.count(old) if old else len(target) + 1
            return len(target) + count * max(len(new) - len(old), 0)
        if name == "join" and len(args) == 1 and isinstance(args[0], (list, tuple, set, frozenset)):
            items = args[0]
            return sum(deep_size(x) for x in items) + len(target) * len(items)
        if name == "format":  # each replacement field may insert the largest argument
            return len(target) + target.count("{") * max([deep_size(v) for v in [*args, *kwargs.values()]] or [0])
        return len(target) + deep_size(args)
    if name in ("extend", "update", "union") and hasattr(target, "__len__"):
        return len(target) + sum(len(a) if hasattr(a, "__len__") else 1 for a in args)
    return (len(target) if hasattr(target, "__len__") else 0) + 1


def builtin_result_size(name: str, args: list[Any]) -> int | None:
    """How large a builtin's result may be (None: not computed), before calling it."""
    if name in ("str", "repr"):
        return sum(deep_size(a) for a in args)
    if name == "sum" and args and not all(isinstance(v, (int, float)) for v in _items(args[0])):
        return None  # summing sequences is quadratic, and nothing a config check needs
    return sum(len(a) if hasattr(a, "__len__") else 1 for a in args) + 1


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
