"""The few rules the rules' evaluation and the config pre-flight's differ by, named, so both clients run one
evaluator (`evaluator.Evaluator(semantics=...)`).

The defaults are the rules': a raise ends its path, paths that meet again keep what each value may be (labels,
`one of` a few values), a loop over what cannot be enumerated runs until its locals settle, only the question's
subject makes a named condition, a call of a class builds the object, the serving environment is not read. The
config pre-flight makes the other choice of each (`specguard.deploy.evaluator`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Semantics:
    # A `raise`, or an `assert` whose test fails, ends its path (and a call whose every path raises ends its
    # caller's). False: it is recorded as an outcome and evaluation goes on past it, so each validation is judged
    # on its own; an `assert` whose test is undecided is assumed to hold; an `except` is judged against the
    # raises recorded in its `try` body, and a bare `raise` in it records what it caught again.
    raise_ends_path: bool = True
    # Every undecided test is a named condition on the paths under it (else only tests about the question's
    # subject are, see `Hooks.subjects`; the others simply fork).
    name_every_doubt: bool = False
    # What paths that meet again hold where they disagree: "labelled", a value that keeps what each may be;
    # "unknown", UNKNOWN (containers of one shape joined item by item), a call's value is what all its paths
    # return alike, and an `or`/`and` that a bool decides after an undecided operand is that bool.
    join: Literal["labelled", "unknown"] = "labelled"
    # A loop over what the evaluation cannot enumerate: "settle" runs its body until its locals settle; "once"
    # runs it once (and so every `while`), under the named condition that it runs (its iterable or its test),
    # with everything it assigns unknown before and after.
    loops: Literal["settle", "once"] = "settle"
    # The code runs in the serving environment (see `environment`): `os.getenv` reads it, a module's
    # `__getattr__` answers the names it declares for type checkers only (vLLM's `envs`), and the environment
    # records which variables decided a branch (directly, or through a local computed from one), so a verdict can
    # name the unset variables it depends on.
    served_environment: bool = False
    # A call of a class builds the object (its dataclass fields, its `__init__`, run). False: enum members by
    # value only; any other new object is unknown.
    construct_objects: bool = True
    # A call of a `warn*` attribute (`logger.warning_once(...)`) is a warning outcome even where the callee is a
    # function the evaluator could follow (else it is followed).
    warn_by_name: bool = False


RULES = Semantics()
