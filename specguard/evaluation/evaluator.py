"""The static evaluator: runs functions of the analyzed source on abstract values, path by path.

This module builds it and dispatches each node to what evaluates its kind: `statements`, `expressions` and
`calls`, one mixin each (and `builtins`, `objects`, `recorded` below them).

It walks a function's statements (`ast`) with what its caller knows (concrete values, labelled unknowns, objects).
A test it can decide picks its branch. A test it cannot decide forks: both branches run and their states join
after it (see `Semantics.join`); when the test is about the question's subject (`Hooks.subjects`), or when the
client asks for every undecided test (`Semantics.name_every_doubt`, the config pre-flight), the test becomes a
named condition on the paths under it, so a verdict can say "not decided because of <this test>". Calls of the
source's functions are inlined up to `max_depth`; builtins and a few standard-library functions are evaluated;
anything else gives an unknown that keeps, as a `maybe`, what its arguments were derived from.

It never imports or runs the analyzed code. Two budgets bound every evaluation: the statements and expressions
it may evaluate and the elements its builtins, methods and operators walk or build (`budget`, then OutOfBudget;
a number of steps comes with `budget.RULES_WORK`, and `within`, the budget of the file judged, is charged too),
and the size of every value it builds (`MAX_ITEMS`, then unknown, sized before it is built).

Raises: by default a `raise`, or an `assert` whose test fails, ends its path (`Flow.raises`, and an outcome is
recorded), and a call whose every path raises ends its caller's path. With `Semantics.raise_ends_path=False` (the
config pre-flight) a raise is recorded and evaluation goes on past it as if it had not fired, so each validation
is judged on its own, an undecided `assert` is assumed to hold for the code after it, and `try` is judged against
the raises recorded in its body (`recorded`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Any

from specguard.evaluation import environment
from specguard.evaluation.budget import RULES_WORK, Budget
from specguard.evaluation.calls import Calls
from specguard.evaluation.choices import Choices
from specguard.evaluation.expressions import Expressions
from specguard.evaluation.hooks import Hooks
from specguard.evaluation.nodes import assigned_names, dropped_calls, own_nodes
from specguard.evaluation.paths import (
    Cond,
    Flow,
    Frame,
    Outcome,
    PathEnds,
    State,
)
from specguard.evaluation.recorded import RecordedRaises
from specguard.evaluation.semantics import RULES, Semantics
from specguard.evaluation.statements import Statements
from specguard.evaluation.values import (
    UNKNOWN,
    Function,
    Obj,
)
from specguard.program.tree import SourceTree


class Evaluator(Statements, Expressions, Calls, RecordedRaises):
    """Evaluates functions of one program; outcomes of every run accumulate in `outcomes`."""

    def __init__(
        self,
        tree: SourceTree,
        *,
        hooks: Hooks | None = None,
        hook: Callable[..., Any] | None = None,
        watch_calls: Iterable[ast.AST] = (),
        watch_attrs: Iterable[str] = (),
        max_depth: int = 4,
        budget: int | Budget = 60_000,
        within: Budget | None = None,
        semantics: Semantics = RULES,
        inline_unused: bool = True,
        track_returns: bool = False,
    ) -> None:
        self.tree = tree
        self.semantics = semantics
        self.hooks = hooks or Hooks()
        self.hook = hook
        self.watch_calls = {id(n) for n in watch_calls}
        self.watch_attrs = set(watch_attrs)
        self.max_depth = max_depth
        # A Budget given (the config pre-flight's, shared with its run) also chooses the pre-flight's way with data:
        # a string or a dict's keys are walked whole (the budget bounds it) and each path of an undecided test holds
        # its own copies of the containers. Steps and work are counted either way: a number of steps (the rules')
        # gets the work of one evaluation with it, both charged to `within` too (the budget of the file judged).
        self.work = budget if isinstance(budget, Budget) else None
        self.meter = self.work or Budget(budget, RULES_WORK, parent=within)  # type: ignore[arg-type]
        self.step = self.meter.step  # type: ignore[method-assign]
        self.charge = self.meter.spend  # type: ignore[method-assign]
        self.raise_ends_path = semantics.raise_ends_path
        self.track_returns = track_returns  # record what the function `call_function` runs returns, path by path
        self._top_returns: set[int] = set()
        self._reraise: list[list[Outcome]] = []
        self.env = environment.current()
        self.quiet = 0  # > 0 while a module-level value is computed: its branches decide no verdict
        self._module_reads: dict[tuple[str, str], list[str]] = {}
        self.inline_unused = inline_unused  # also inline calls whose result is dropped and that get nothing labelled
        # in a writer's run (`lazy_owner` set), also follow the calls whose results it drops that the instance makes
        # on itself: a client that reads constructors as a whole (see evaluation/instances.py) sets it
        self.own_calls = False
        # A writer run's instance: a module-level call stored straight into one of its attributes is evaluated
        # when something reads the attribute (a Deferred), so the calls behind attributes no one reads cost nothing.
        self.lazy_owner: Obj | None = None
        self.outcomes: list[Outcome] = []
        # Path by path (see `choices`): which side of each undecided test of the run function's own body to take
        self.choices: Choices | None = None
        self.calls: list[ast.AST] = []  # the call nodes being inlined, outermost first
        self._reading: ast.AST | None = None  # the attribute being read (a property it runs is called there)
        self.yields: list[list[tuple[Any, frozenset]]] = []  # per generator being run: (what it yields, on which path)
        self.yield_writes: list[list[State]] = []  # per generator being run: what it had written at each yield
        # per generator a call made: what it writes after its yields, done where a `with` block over it ends
        self.on_exit: dict[int, tuple[Any, dict[tuple[Any, str], Any]]] = {}
        self._conds: dict[tuple[int, str], Cond] = {}
        self._module_values: dict[tuple[str, str], Any] = {}
        self._promised: dict[tuple[int, str], Any] = {}  # what each function's return annotation promises
        self._factory_fields: dict[tuple[tuple[str, str], str], Any] = {}  # see ObjectModel._factory_field
        self._resolving: set[tuple[str, str]] = set()
        self._active: dict[int, int] = {}  # id(function node) -> how many of its calls are being inlined
        self._dropped: set[int] = set()  # call nodes whose result is not used (expression statements)
        self._trying = 0  # how many `try` bodies are being run: only a raise inside one needs its class's lineage
        # Inside a `try` body, the raising paths of a call that also returns: each (path, what it raises, the node
        # that raises where the evaluation could not tell whether it does) becomes a raise of the statement holding
        # the call, which that statement's block adds to its flow.
        self._pending: list[tuple[frozenset, set[str] | None, ast.AST | None]] = []
        self._raise_points: list[ast.AST] = []  # on a noting run (`choices`), the raises taken apart if they matter
        # Paths that end in a raise inside an expression (a side of an undecided `x if c else y`, an operand of an
        # `and`/`or` past an undecided one), each as the state where it raised: the block running the statement
        # that holds the expression adds them to its flow's raises.
        self.side_raises: list[State] = []
        # raises of some of the values an operand may be, not yet a path's (see `binop_at`)
        self.raised_aside: list[set[str] | None] = []
        # Objects whose attributes a state's writes hold, keyed by their id: kept alive while the evaluator is, so
        # that no object made later takes an id over, and with it what was written on one already gone.
        self._written: list[Obj] = []

    # ---- entry points ------------------------------------------------------------------------------------------

    def call_function(
        self,
        func: Function,
        args: list[Any],
        kwargs: dict[str, Any],
        path: frozenset = frozenset(),
        self_value: Any = None,
        depth: int = 0,
    ) -> tuple[Any, State]:
        """Run `func` with these arguments; returns its value (joined over its paths) and the end state."""
        state = State({}, {}, path)
        if self.track_returns:
            self._top_returns = {id(n) for n in own_nodes(func.node) if isinstance(n, ast.Return)}
        try:
            value = self._invoke(func, self_value, args, kwargs, state, depth, force=True)
        except PathEnds:
            value = UNKNOWN
        return value, state

    def run(
        self, func: Function, bindings: dict[str, Any], path: frozenset = frozenset(), writes: dict | None = None
    ) -> Flow:
        """Run `func`'s body with its parameters bound as given (and objects' attributes as `writes` has them):
        every path's end (returns, raises)."""
        state = State(dict(bindings), dict(writes or {}), path)
        frame = Frame(func.module, func.owner, func.closure, 0)
        self.home = self.here = func.module.path
        body = func.node.body if not isinstance(func.node, ast.Lambda) else []
        self._dropped |= dropped_calls(func.node)
        flow = self.exec_block(body, frame, state)  # type: ignore[arg-type]
        if flow.normal is not None:
            flow.returns.append((flow.normal, None))
            flow.normal = None
        return flow

    def step(self) -> None:
        """One statement or expression evaluated (bound to the meter's `step` in `__init__`)."""

    def exec_stmt(self, stmt: ast.stmt, frame: Frame, state: State) -> Flow:
        method = _STATEMENTS.get(type(stmt))
        if method is not None:
            return method(self, stmt, frame, state)
        # class definitions and anything newer: what they bind is unknown
        for name in assigned_names([stmt]):
            state.locals[name] = UNKNOWN
        return Flow(normal=state)

    # ---- expressions --------------------------------------------------------------------------------------------

    def eval(self, expr: ast.expr | None, frame: Frame, state: State) -> Any:
        if expr is None:
            return None
        self.step()
        method = _EXPRESSIONS.get(type(expr))
        if method is None:
            return UNKNOWN
        return method(self, expr, frame, state)


_STATEMENTS: dict[type, Callable[..., Flow]] = {
    ast.Expr: Evaluator._s_expr,
    ast.Assign: Evaluator._s_assign,
    ast.AnnAssign: Evaluator._s_annassign,
    ast.AugAssign: Evaluator._s_augassign,
    ast.If: Evaluator._s_if,
    ast.Return: Evaluator._s_return,
    ast.Raise: Evaluator._s_raise,
    ast.Assert: Evaluator._s_assert,
    ast.For: Evaluator._s_for,
    ast.AsyncFor: Evaluator._s_for,
    ast.While: Evaluator._s_loop_while,
    ast.Try: Evaluator._s_try,
    ast.With: Evaluator._s_with,
    ast.AsyncWith: Evaluator._s_with,
    ast.Match: Evaluator._s_match,
    ast.FunctionDef: Evaluator._s_def,
    ast.AsyncFunctionDef: Evaluator._s_def,
    ast.Import: Evaluator._s_import,
    ast.ImportFrom: Evaluator._s_import,
    ast.Delete: Evaluator._s_delete,
    ast.Break: Evaluator._s_break,
    ast.Continue: Evaluator._s_continue,
    ast.Pass: Evaluator._s_pass,
    ast.Global: Evaluator._s_global,
    ast.Nonlocal: Evaluator._s_pass,
}
if hasattr(ast, "TryStar"):  # Python 3.11+
    _STATEMENTS[ast.TryStar] = Evaluator._s_try

_EXPRESSIONS: dict[type, Callable[..., Any]] = {
    ast.Constant: Evaluator._e_constant,
    ast.Name: Evaluator._e_name,
    ast.Attribute: Evaluator._e_attribute,
    ast.Tuple: Evaluator._e_tuple,
    ast.List: Evaluator._e_list,
    ast.Set: Evaluator._e_set,
    ast.Dict: Evaluator._e_dict,
    ast.JoinedStr: Evaluator._e_joinedstr,
    ast.BoolOp: Evaluator._e_boolop,
    ast.UnaryOp: Evaluator._e_unaryop,
    ast.BinOp: Evaluator._e_binop,
    ast.IfExp: Evaluator._e_ifexp,
    ast.NamedExpr: Evaluator._e_namedexpr,
    ast.Subscript: Evaluator._e_subscript,
    ast.Compare: Evaluator._e_compare,
    ast.Lambda: Evaluator._e_lambda,
    ast.Await: Evaluator._e_await,
    ast.Yield: Evaluator._e_yield,
    ast.YieldFrom: Evaluator._e_yield,
    ast.Starred: Evaluator._e_starred,
    ast.ListComp: Evaluator._e_listcomp,
    ast.GeneratorExp: Evaluator._e_generatorexp,
    ast.SetComp: Evaluator._e_setcomp,
    ast.DictComp: Evaluator._e_dictcomp,
    ast.Call: Evaluator._e_call,
}
