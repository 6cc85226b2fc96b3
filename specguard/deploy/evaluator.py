"""The evaluator the config pre-flight runs on the served vLLM's code: `specguard.evaluation`'s, with the config
pre-flight's semantics and a budget that counts work as well as steps (shared with the run's, see `budget`).

Its semantics keep a verdict about one validation from depending on others: a raise (or a failing assert) is
recorded and evaluation goes on past it as if it had not fired, so each validation is judged on its own and an
unrelated failure, or a value this evaluation holds stale, never hides the hazard being judged; an `assert` whose
test is undecided is assumed to hold. Every undecided test is a named condition, so a verdict is either certain or
"not judged because it depends on <this expression>"; paths that disagree join to unknown; a loop over what
cannot be enumerated runs once; a new object is unknown (constructors are not run); the serving environment is
read, and remembered where it decided a branch."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Any

from specguard.evaluation.budget import EVALUATION_STEPS, evaluation_budget
from specguard.evaluation.evaluator import Evaluator
from specguard.evaluation.semantics import Semantics
from specguard.program.tree import SourceTree

CONFIG = Semantics(
    raise_ends_path=False,
    name_every_doubt=True,
    join="unknown",
    loops="once",
    served_environment=True,
    construct_objects=False,
    warn_by_name=True,
)


def config_evaluator(
    tree: SourceTree,
    *,
    hook: Callable[..., Any] | None = None,
    watch_calls: Iterable[ast.AST] = (),
    watch_attrs: Iterable[str] = (),
    max_depth: int = 4,
    max_steps: int = EVALUATION_STEPS,
    track_returns: bool = False,
) -> Evaluator:
    """An evaluator of `tree` for the config pre-flight; outcomes of every run accumulate in its `outcomes`."""
    return Evaluator(
        tree,
        hook=hook,
        watch_calls=watch_calls,
        watch_attrs=watch_attrs,
        max_depth=max_depth,
        budget=evaluation_budget(max_steps),
        semantics=CONFIG,
        track_returns=track_returns,
    )
