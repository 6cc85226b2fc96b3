"""The flow-sensitive walk of one function body: which tracked items each local holds at each statement.

The walk follows statement order, so what counts at a use is the value there: an `if`/`elif`, a conditional
expression, `match`, `try` and loops each give their branches their own state and join them after; `return`,
`raise`, `continue` and `break` end a path. A guard test (`FlowSpec.guards`) that holds on a path makes the
items it clears harmless there: in the branch it selects, after an early exit under its negation, after an
`assert`, in a `match` case. Loops are walked until their locals stop changing (at most `MAX_ROUNDS` times).

Tracked values pass through assignments (tuple unpacking included), augmented assignments, conditional and
boolean expressions, arithmetic, builtins that carry their argument (`max`, `min`, `int`, `list`, ...),
containers (`dict(...)`, `{...}`, `[...]`, comprehensions, `d[k] = v`, `d.update(...)`) and their unpacking.
Everything else (an unknown call, a slice bound, a comparison) yields an untracked value; calls of functions
of the analyzed project are answered by the `Hooks` (their summaries).

Calls and attribute stores are reported to the hooks once, after the walk, with the values of the last round.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Sequence

from specguard.analysis.ast_tools import annotation_names, is_super, last_name, span
from specguard.analysis.dataflow.calls import Passed
from specguard.analysis.dataflow.values import (
    ANY,
    EMPTY,
    EQUALS,
    ONE_ELEMENT,
    PARAM,
    PARAM_ORIGIN,
    SAME,
    FlowSpec,
    Item,
    Key,
    Value,
    extend,
    join,
    labelled,
    rekey,
    select,
    step,
    value_of,
)

MAX_ROUNDS = 3  # walks of a loop body until its locals stop changing; later changes are not followed

# Python builtins whose result is (a mix of) their arguments
_SCALAR = frozenset({"max", "min", "int", "float", "bool", "abs", "round", "sum", "ceil", "floor"})
_SEQUENCE = frozenset({"list", "tuple", "sorted", "reversed", "copy", "deepcopy"})
_UNORDERED = frozenset({"set", "frozenset"})

Facts = frozenset[tuple[int, str]]  # (guard index, origin) known to hold on a path
_NO_FACTS: Facts = frozenset()


class Hooks:
    """What a walk asks of its user (a rule, or the stage-one summarizer). The defaults know nothing."""

    def callee(self, func: ast.expr) -> str | None:
        """Last name of the module-level function a call reaches (imports resolved); None for a method."""
        return None

    def call(self, node: ast.Call, args: list[Passed]) -> Value | None:
        """What a call of a project function returns, from its summary."""
        return None

    def self_attribute(self, name: str) -> Value:
        """What `self.<name>` may hold when this function has not assigned it yet."""
        return EMPTY

    def on_call(self, node: ast.Call, args: list[Passed]) -> None:
        """Every call, once, with what its arguments carry."""

    def on_store(self, node: ast.Attribute, value: Value) -> None:
        """Every store of a tracked value into an attribute (`x.attr = value`), once."""


class State:
    """The locals that hold tracked items on one path, and the guard facts known there."""

    __slots__ = ("env", "facts")

    def __init__(self, env: dict[str, Value], facts: Facts = _NO_FACTS) -> None:
        self.env = env
        self.facts = facts

    def copy(self) -> State:
        return State(dict(self.env), self.facts)


class _Loop:
    __slots__ = ("breaks", "continues")

    def __init__(self) -> None:
        self.breaks: list[State | None] = []
        self.continues: list[State | None] = []


def parameter_env(
    func: ast.FunctionDef | ast.AsyncFunctionDef, spec: FlowSpec, *, symbolic: bool, bound: bool
) -> tuple[dict[str, Value], tuple[tuple[str, str], ...]]:
    """The locals a function starts with, and (parameter, label) for parameters tracked by annotation or name.

    `symbolic` (for summaries): every parameter stands for whatever the caller passes (origin "param:NAME").
    Otherwise (for a checked function) only parameters the spec names are tracked, with their own origin.
    """
    a = func.args
    params = [*a.posonlyargs, *a.args]
    if bound and params:
        params = params[1:]
    params += [*a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
    env: dict[str, Value] = {}
    intrinsic: list[tuple[str, str]] = []
    for p in params:
        labels = [spec.parameters[p.arg]] if p.arg in spec.parameters else []
        if p.annotation is not None:
            labels += [spec.annotations[n] for n in sorted(annotation_names(p.annotation)) if n in spec.annotations]
        origin = PARAM_ORIGIN + p.arg if symbolic else p.arg
        items = [Item(PARAM, origin, None, f"`{p.arg}`")] if symbolic else []
        for label in dict.fromkeys(labels):
            intrinsic.append((p.arg, label))
            items.append(Item(label, origin, None, f"`{p.arg}`", (), span(p)))
        if items:
            env[p.arg] = value_of(items)
    return env, tuple(intrinsic)


def _names(node: ast.expr, constant: str) -> bool:
    return bool(constant) and last_name(node) == constant


def _const_key(node: ast.expr) -> Key:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
        return node.value
    return ANY


def _blur(value: Value) -> Value:
    """After arithmetic: a scalar stays itself; container elements lose their positions."""
    if all(i.key is None for i in value.values()):
        return value
    return value_of([i if i.key is None else i.at(ANY) for i in value.values()])


def _common(sets: Sequence[Facts]) -> Facts:
    if not sets:
        return _NO_FACTS
    out = sets[0]
    for other in sets[1:]:
        out = out & other
    return out


def _same(a: State | None, b: State | None) -> bool:
    if a is None or b is None:
        return a is b
    if a.facts != b.facts or a.env.keys() != b.env.keys():
        return False
    return all(a.env[k].keys() == b.env[k].keys() for k in a.env)


_FLIP = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}


def _at_most_one(op: ast.cmpop, n: int) -> bool | None:
    """`len(X) <op> n`: True if it holds only with at most one element, False only with more, None: neither."""
    table = {(ast.Eq, 1): True, (ast.LtE, 1): True, (ast.Lt, 2): True}
    table |= {(ast.NotEq, 1): False, (ast.Gt, 1): False, (ast.GtE, 2): False}
    return table.get((type(op), n))


def _equality(op: ast.cmpop, other: ast.expr, constant: str) -> bool | None:
    """True if the comparison holds only when the tracked side equals the constant, False only when it does
    not, None if it says neither."""
    if isinstance(op, (ast.In, ast.NotIn)):
        if not (isinstance(other, (ast.Tuple, ast.List, ast.Set)) and other.elts):
            return None
        if not all(_names(e, constant) for e in other.elts):
            return None
        return isinstance(op, ast.In)
    if not _names(other, constant):
        return None
    if isinstance(op, (ast.Eq, ast.Is)):
        return True
    if isinstance(op, (ast.NotEq, ast.IsNot)):
        return False
    return None


def _shadow_parameters(args: ast.arguments, inner: State) -> None:
    """A nested function's or lambda's parameters hide the enclosing locals of the same names."""
    for p in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if p is not None:
            inner.env.pop(p.arg, None)


class FlowWalker:
    """One walk of one function. `run` fills `returns`, `attributes` and reports calls/stores to the hooks."""

    def __init__(self, spec: FlowSpec, hooks: Hooks, *, self_name: str | None = None, qualname: str = "") -> None:
        self.spec = spec
        self.hooks = hooks
        self.self_name = self_name
        self.qualname = qualname
        self.returns: Value = EMPTY
        self.attributes: dict[str, Value] = {}  # self.<attr> -> what this function writes into it
        self.local_names: set[str] = set()
        self._loops: list[_Loop] = []
        self._calls: dict[int, tuple[ast.Call, list[Passed]]] = {}
        self._stores: dict[int, tuple[ast.Attribute, Value]] = {}

    def run(self, func: ast.FunctionDef | ast.AsyncFunctionDef, env: dict[str, Value]) -> None:
        a = func.args
        self.local_names.update(p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p)
        self._block(func.body, State(dict(env)))
        for node, args in self._calls.values():
            self.hooks.on_call(node, args)
        for target, value in self._stores.values():
            self.hooks.on_store(target, value)

    # ---- facts ------------------------------------------------------------------------------------------

    def _cleared(self, item: Item, facts: Facts) -> bool:
        for index, origin in facts:
            guard = self.spec.guards[index]
            if item.label in guard.clears and (origin == item.origin or ANY in (origin, item.origin)):
                return True
        return False

    def _filter(self, value: Value, facts: Facts) -> Value:
        if not facts or not value:
            return value
        kept = {k: i for k, i in value.items() if not self._cleared(i, facts)}
        return value if len(kept) == len(value) else kept

    def _assume(self, st: State, facts: Facts) -> None:
        """From here on this path, `facts` hold: what they clear is dropped from every local."""
        if not facts or facts <= st.facts:
            return
        st.facts = st.facts | facts
        for name, value in list(st.env.items()):
            kept = self._filter(value, st.facts)
            if kept is not value:
                if kept:
                    st.env[name] = kept
                else:
                    del st.env[name]

    def _join(self, states: Iterable[State | None]) -> State | None:
        live = [s for s in states if s is not None]
        if len(live) <= 1:
            return live[0] if live else None
        env: dict[str, Value] = {}
        for name in {n for s in live for n in s.env}:
            for s in live:
                if name in s.env:
                    held = s.env[name]
                elif name.startswith("self."):  # not written on this path: what the class's methods write
                    held = self._filter(self.hooks.self_attribute(name[len("self.") :]), s.facts)
                else:
                    continue
                env[name] = join(env.get(name, EMPTY), held)
        return State(env, _common([s.facts for s in live]))

    # ---- statements -------------------------------------------------------------------------------------

    def _block(self, body: list[ast.stmt], st: State | None) -> State | None:
        for stmt in body:
            if st is None:
                return None
            handler = _STATEMENTS.get(type(stmt))
            if handler is None:
                for child in ast.iter_child_nodes(stmt):
                    if isinstance(child, ast.expr):
                        self._expr(child, st)
            else:
                st = handler(self, stmt, st)
        return st

    def _assign(self, node: ast.Assign, st: State) -> State:
        value = self._expr(node.value, st)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = join(value, self._fold(node, node.targets[0].id, value))
        for target in node.targets:
            self._bind(target, value, st, node.lineno)
        return st

    def _augassign(self, node: ast.AugAssign, st: State) -> State:
        value = self._expr(node.value, st)
        current = self._expr(node.target, st)
        if isinstance(node.target, ast.Name) and isinstance(node.op, (ast.BitOr, ast.BitAnd)):
            value = join(value, self._fold_item(node, "|" if isinstance(node.op, ast.BitOr) else "&", value))
        self._bind(node.target, join(current, value), st, node.lineno)
        return st

    def _annassign(self, node: ast.AnnAssign, st: State) -> State:
        value = self._expr(node.value, st) if node.value is not None else EMPTY
        if isinstance(node.target, ast.Name):
            name = node.target.id
            names = annotation_names(node.annotation)
            for label in sorted({self.spec.annotations[n] for n in names if n in self.spec.annotations}):
                origin = f"{name}@{node.lineno}"
                value = join(value, value_of([Item(label, origin, None, f"`{name}`", (), span(node.target))]))
        if node.value is not None or value:
            self._bind(node.target, value, st, node.lineno)
        return st

    def _expr_stmt(self, node: ast.Expr, st: State) -> State:
        self._expr(node.value, st)
        return st

    def _if(self, node: ast.If, st: State) -> State | None:
        true, false = self._test(node.test, st)
        body = st.copy()
        self._assume(body, true)
        after_body = self._block(node.body, body)
        self._assume(st, false)
        return self._join([after_body, self._block(node.orelse, st)])

    def _while(self, node: ast.While, st: State) -> State | None:
        true, false = self._test(node.test, st)
        endless = isinstance(node.test, ast.Constant) and bool(node.test.value)
        return self._loop(node, st, lambda s: self._assume(s, true), false, endless)

    def _for(self, node: ast.For | ast.AsyncFor, st: State) -> State | None:
        element = select(self._expr(node.iter, st), ANY)
        return self._loop(node, st, lambda s: self._bind(node.target, element, s, node.lineno, record=False))

    def _loop(
        self,
        node: ast.For | ast.AsyncFor | ast.While,
        st: State,
        enter: Callable[[State], None],
        exit_facts: Facts = _NO_FACTS,
        endless: bool = False,
    ) -> State | None:
        head = st
        for _ in range(MAX_ROUNDS):
            loop = _Loop()
            self._loops.append(loop)
            body = head.copy()
            enter(body)
            end = self._block(node.body, body)
            self._loops.pop()
            ends = [s for s in (end, *loop.continues) if s is not None]
            widened = self._join([head, *ends])
            if _same(widened, head):
                break
            head = widened  # type: ignore[assignment]
        normal = None
        if not endless:
            normal = head.copy()
            self._assume(normal, exit_facts)
            # a check every completed iteration made (each spec against the first) holds for them all
            every = _common([s.facts for s in ends]) if ends else _NO_FACTS
            self._assume(normal, frozenset(f for f in every if self.spec.guards[f[0]].universal))
            normal = self._block(node.orelse, normal)
        return self._join([normal, *loop.breaks])

    def _with(self, node: ast.With | ast.AsyncWith, st: State) -> State | None:
        for item in node.items:
            value = self._expr(item.context_expr, st)
            if item.optional_vars is not None:
                self._bind(item.optional_vars, value, st, node.lineno)
        return self._block(node.body, st)

    def _return(self, node: ast.Return, st: State) -> None:
        if node.value is not None:
            self.returns = join(self.returns, self._expr(node.value, st))
        return None

    def _raise(self, node: ast.Raise, st: State) -> None:
        for part in (node.exc, node.cause):
            if part is not None:
                self._expr(part, st)
        return None

    def _assert(self, node: ast.Assert, st: State) -> State:
        true, _ = self._test(node.test, st)
        if node.msg is not None:
            self._expr(node.msg, st)
        self._assume(st, true)
        return st

    def _try(self, node: ast.Try, st: State) -> State | None:
        before = st.copy()
        after_body = self._block(node.body, st)
        # a handler may start anywhere in the body: what held before it or after it
        entry = self._join([before, after_body.copy() if after_body is not None else None])
        outs = []
        for handler in node.handlers:
            state = entry.copy() if entry is not None else None
            if state is not None and handler.name:
                state.env.pop(handler.name, None)
            outs.append(self._block(handler.body, state))
        outs.append(self._block(node.orelse, after_body))
        result = self._join(outs)
        if not node.finalbody:
            return result
        if result is None:
            self._block(node.finalbody, entry.copy() if entry is not None else before)
            return None
        return self._block(node.finalbody, result)

    def _match(self, node: ast.Match, st: State) -> State | None:
        subject = self._expr(node.subject, st)
        outs: list[State | None] = []
        for case in node.cases:
            state = st.copy()
            self._assume(state, self._pattern_facts(case.pattern, subject))
            self._bind_pattern(case.pattern, subject, state, node.lineno)
            if case.guard is not None:
                self._assume(state, self._test(case.guard, state)[0])
            outs.append(self._block(case.body, state))
            if case.guard is None and self._irrefutable(case.pattern):
                return self._join(outs)
        return self._join([*outs, st])

    def _pattern_facts(self, pattern: ast.pattern, subject: Value) -> Facts:
        while isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
            pattern = pattern.pattern
        options = pattern.patterns if isinstance(pattern, ast.MatchOr) else [pattern]
        facts = set()
        for index, guard in enumerate(self.spec.guards):
            if guard.kind != EQUALS:
                continue
            if options and all(isinstance(p, ast.MatchValue) and _names(p.value, guard.constant) for p in options):
                facts |= {(index, i.origin) for i in labelled(subject, guard.label) if i.key is None}
        return frozenset(facts)

    def _irrefutable(self, pattern: ast.pattern) -> bool:
        if isinstance(pattern, ast.MatchAs):
            return pattern.pattern is None or self._irrefutable(pattern.pattern)
        return isinstance(pattern, ast.MatchOr) and any(self._irrefutable(p) for p in pattern.patterns)

    def _bind_pattern(self, pattern: ast.pattern, subject: Value, st: State, line: int) -> None:
        if isinstance(pattern, ast.MatchAs) and pattern.name is not None:
            self._bind(ast.Name(pattern.name), subject, st, line)
        for child in ast.walk(pattern):
            name = getattr(child, "name", None) if isinstance(child, (ast.MatchAs, ast.MatchStar)) else None
            if name and child is not pattern:
                st.env.pop(name, None)

    def _break(self, node: ast.Break, st: State) -> None:
        if self._loops:
            self._loops[-1].breaks.append(st)
        return None

    def _continue(self, node: ast.Continue, st: State) -> None:
        if self._loops:
            self._loops[-1].continues.append(st)
        return None

    def _delete(self, node: ast.Delete, st: State) -> State:
        for target in node.targets:
            if isinstance(target, ast.Name):
                st.env.pop(target.id, None)
            else:
                self._expr(target, st)
        return st

    def _nested(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, st: State) -> State:
        """A nested function: its calls are checked with the enclosing locals; its returns are its own. A nested
        class's methods are scopes of their own (ast_tools.scopes), so its body is not walked here."""
        st.env.pop(node.name, None)
        if isinstance(node, ast.ClassDef):
            return st
        returns, loops = self.returns, self._loops
        self._loops = []
        inner = st.copy()
        _shadow_parameters(node.args, inner)
        self._block(node.body, inner)
        self.returns, self._loops = returns, loops
        return st

    def _skip(self, node: ast.stmt, st: State) -> State:
        return st

    # ---- stores -----------------------------------------------------------------------------------------

    def _is_self(self, node: ast.expr) -> bool:
        return self.self_name is not None and isinstance(node, ast.Name) and node.id == self.self_name

    def _grow(self, name: str, added: Value, st: State, line: int) -> None:
        self.local_names.add(name)
        if added:
            st.env[name] = join(st.env.get(name, EMPTY), extend(added, step(f"`{name}`", line)))

    def _bind(self, target: ast.expr, value: Value, st: State, line: int, record: bool = True) -> None:
        if isinstance(target, ast.Name):
            self.local_names.add(target.id)
            if value:
                st.env[target.id] = extend(value, step(f"`{target.id}`", line)) if record else value
            else:
                st.env.pop(target.id, None)
        elif isinstance(target, (ast.Tuple, ast.List)):
            after_star = False
            for index, element in enumerate(target.elts):
                if isinstance(element, ast.Starred):
                    after_star = True
                    self._bind(element.value, rekey(select(value, ANY), ANY), st, line, record)
                else:
                    self._bind(element, select(value, ANY if after_star else index), st, line, record)
        elif isinstance(target, ast.Attribute):
            if self._is_self(target.value):
                name = f"self.{target.attr}"
                st.env[name] = extend(value, step(f"`{name}`", line))  # even empty: it hides the class's value
                if value:
                    written = extend(value, step(f"`{name}`, set in `{self.qualname}`", line))
                    self.attributes[target.attr] = join(self.attributes.get(target.attr, EMPTY), written)
            else:
                self._expr(target.value, st)
            if value:
                self._stores[id(target)] = (target, value)
        elif isinstance(target, ast.Subscript):
            self._expr(target.slice, st)
            if isinstance(target.value, ast.Name):
                self._grow(target.value.id, rekey(value, _const_key(target.slice)), st, line)
            else:
                self._expr(target.value, st)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, value, st, line, record)

    # ---- folds (an `or`/`and` accumulation over a loop) ---------------------------------------------------

    def _fold(self, node: ast.Assign, target: str, operands: Value) -> Value:
        if not (self.spec.fold and self._loops):
            return EMPTY
        value = node.value

        def is_target(e: ast.expr) -> bool:
            return isinstance(e, ast.Name) and e.id == target

        if isinstance(value, ast.BoolOp) and any(is_target(v) for v in value.values):
            op = "or" if isinstance(value.op, ast.Or) else "and"
        elif isinstance(value, ast.BinOp) and isinstance(value.op, (ast.BitOr, ast.BitAnd)):
            if not (is_target(value.left) or is_target(value.right)):
                return EMPTY
            op = "|" if isinstance(value.op, ast.BitOr) else "&"
        else:
            return EMPTY
        return self._fold_item(node, op, operands)

    def _fold_item(self, node: ast.stmt, op: str, operand: Value) -> Value:
        if not (self.spec.fold and self._loops):
            return EMPTY
        origins = sorted({i.origin for i in labelled(operand, self.spec.reduced)}) or [ANY]
        return value_of([Item(self.spec.fold, o, None, op, (), span(node)) for o in origins])

    # ---- expressions ------------------------------------------------------------------------------------

    def _expr(self, node: ast.expr, st: State) -> Value:
        handler = _EXPRESSIONS.get(type(node))
        if handler is not None:
            return handler(self, node, st)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._expr(child, st)
        return EMPTY

    def _name(self, node: ast.Name, st: State) -> Value:
        return st.env.get(node.id, EMPTY)

    def _attribute(self, node: ast.Attribute, st: State) -> Value:
        if self._is_self(node.value):
            held = st.env.get(f"self.{node.attr}")
            if held is None:
                held = self._filter(self.hooks.self_attribute(node.attr), st.facts)
            return join(held, self._filter(self._derive(EMPTY, node), st.facts))
        owner = self._expr(node.value, st)
        return self._filter(self._derive(owner, node), st.facts)

    def _derive(self, owner: Value, node: ast.Attribute) -> Value:
        """The tracked items an attribute read derives from its owner (`desc.num_tokens` of a descriptor)."""
        rules = self.spec.by_attribute.get(node.attr)
        if not rules:
            return EMPTY
        source = f"`{_text(node)}`"
        out: Value = EMPTY
        matched = False
        for owner_label, label, origin in rules:
            if owner_label == ANY:
                if not matched:
                    made = origin or ANY
                    out = join(out, value_of([Item(label, made, None, source, (), span(node))]))
                continue
            for item in owner.values():
                if item.key is None and item.label in (owner_label, PARAM):
                    matched = True
                    out = join(out, value_of([Item(label, origin or item.origin, None, source, (), span(node))]))
        return out

    def _subscript(self, node: ast.Subscript, st: State) -> Value:
        owner = self._expr(node.value, st)
        self._expr(node.slice, st)
        if isinstance(node.slice, ast.Slice):
            return owner
        return select(owner, _const_key(node.slice))

    def _binop(self, node: ast.BinOp, st: State) -> Value:
        value = join(self._expr(node.left, st), self._expr(node.right, st))
        return value if isinstance(node.op, ast.BitOr) else _blur(value)

    def _unaryop(self, node: ast.UnaryOp, st: State) -> Value:
        value = self._expr(node.operand, st)
        return EMPTY if isinstance(node.op, ast.Not) else value

    def _boolop(self, node: ast.BoolOp, st: State) -> Value:
        out: Value = EMPTY
        for part in node.values:
            out = join(out, self._expr(part, st))
        return out

    def _ifexp(self, node: ast.IfExp, st: State) -> Value:
        true, false = self._test(node.test, st)
        body, orelse = st.copy(), st.copy()
        self._assume(body, true)
        self._assume(orelse, false)
        return join(self._expr(node.body, body), self._expr(node.orelse, orelse))

    def _namedexpr(self, node: ast.NamedExpr, st: State) -> Value:
        value = self._expr(node.value, st)
        self._bind(node.target, value, st, node.lineno)
        return value

    def _dict(self, node: ast.Dict, st: State) -> Value:
        out: Value = EMPTY
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:  # `**other`
                out = join(out, self._expr(value, st))
            else:
                self._expr(key, st)
                out = join(out, rekey(self._expr(value, st), _const_key(key)))
        return out

    def _sequence(self, node: ast.List | ast.Tuple | ast.Set, st: State) -> Value:
        out: Value = EMPTY
        known = not isinstance(node, ast.Set)
        for index, element in enumerate(node.elts):
            if isinstance(element, ast.Starred):
                out = join(out, rekey(select(self._expr(element.value, st), ANY), ANY))
                known = False
            else:
                out = join(out, rekey(self._expr(element, st), index if known else ANY))
        return out

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, st: State) -> Value:
        inner = self._enter_generators(node.generators, st)
        if isinstance(node, ast.DictComp):
            self._expr(node.key, inner)
            return rekey(self._expr(node.value, inner), ANY)
        return rekey(self._expr(node.elt, inner), ANY)

    def _enter_generators(self, generators: list[ast.comprehension], st: State) -> State:
        inner = st.copy()
        for gen in generators:
            element = select(self._expr(gen.iter, inner), ANY)
            self._bind(gen.target, element, inner, getattr(gen.iter, "lineno", 0), record=False)
            for condition in gen.ifs:
                self._assume(inner, self._test(condition, inner)[0])
        return inner

    def _lambda(self, node: ast.Lambda, st: State) -> Value:
        inner = st.copy()
        _shadow_parameters(node.args, inner)
        self._expr(node.body, inner)
        return EMPTY

    def _await(self, node: ast.Await, st: State) -> Value:
        return self._expr(node.value, st)

    # ---- calls ------------------------------------------------------------------------------------------

    def _args(self, node: ast.Call, st: State) -> list[Passed]:
        out = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                out.append(Passed(arg, None, "*", self._expr(arg.value, st)))
            else:
                out.append(Passed(arg, None, "", self._expr(arg, st)))
        for kw in node.keywords:
            out.append(Passed(kw, kw.arg, "" if kw.arg else "**", self._expr(kw.value, st)))
        return out

    def _call(self, node: ast.Call, st: State) -> Value:
        func = node.func
        owner: Value = EMPTY
        if isinstance(func, ast.Attribute):
            if not (self._is_self(func.value) or is_super(func.value)):
                owner = self._expr(func.value, st)
        elif not isinstance(func, ast.Name):
            self._expr(func, st)
        args = self._args(node, st)
        self._calls[id(node)] = (node, args)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in self.local_names:
            result = self._container_method(func.value.id, func.attr, node, args, owner, st)
            if result is not None:
                return result
        name = self.hooks.callee(func)
        if name is not None:
            known = self._known_call(name, node, args)
            if known is not None:
                return self._filter(known, st.facts)
        result = self.hooks.call(node, args)
        return self._filter(result, st.facts) if result else EMPTY

    def _known_call(self, name: str, node: ast.Call, args: list[Passed]) -> Value | None:
        spec = self.spec
        if name in spec.producers:
            label, origin = spec.producers[name], f"@{node.lineno}:{node.col_offset}"
            return value_of([Item(label, origin, None, f"`{name}(...)`", (), span(node))])
        if name in spec.reductions:
            reduced = set()
            for arg in args:
                reduced |= {i.origin for i in labelled(arg.value, spec.reduced)} if spec.reduced else set()
            label = spec.reductions[name]
            return value_of([Item(label, o, None, name, (), span(node)) for o in sorted(reduced) or [ANY]])
        positional = [a.value for a in args if a.keyword is None and a.star != "**"]
        if name in _SCALAR:
            out: Value = EMPTY
            for value in positional:
                out = join(out, select(value, ANY))
            return out
        if name in _SEQUENCE or name in _UNORDERED:
            out = EMPTY
            for value in positional:
                out = join(out, value)
            return rekey(out, ANY) if name in _UNORDERED else out
        if name == "dict":
            out = EMPTY
            for arg in args:
                out = join(out, rekey(arg.value, arg.keyword) if arg.keyword else arg.value)
            return out
        return None

    def _container_method(
        self, name: str, method: str, node: ast.Call, args: list[Passed], owner: Value, st: State
    ) -> Value | None:
        """`d.update(...)`, `xs.append(...)`, `d.get(k)`... on a local: what it adds, or what it returns."""
        positional = [a for a in args if a.keyword is None and a.star == ""]
        first_key = _const_key(node.args[0]) if positional else ANY
        if method == "update":
            added: Value = EMPTY
            for arg in args:
                added = join(added, rekey(arg.value, arg.keyword) if arg.keyword else arg.value)
            self._grow(name, added, st, node.lineno)
            return EMPTY
        if method in ("append", "add", "insert") and positional:
            self._grow(name, rekey(positional[-1].value, ANY), st, node.lineno)
            return EMPTY
        if method == "extend" and positional:
            self._grow(name, rekey(select(positional[0].value, ANY), ANY), st, node.lineno)
            return EMPTY
        if method == "setdefault" and positional:
            if len(positional) > 1:
                self._grow(name, rekey(positional[1].value, first_key), st, node.lineno)
            return select(st.env.get(name, EMPTY), first_key)
        if method in ("get", "pop"):
            out = select(owner, first_key)
            return join(out, positional[1].value) if len(positional) > 1 else out
        if method == "copy":
            return owner
        if method == "values":
            return rekey(select(owner, ANY), ANY)
        return None

    # ---- tests ------------------------------------------------------------------------------------------

    def _test(self, node: ast.expr, st: State) -> tuple[Facts, Facts]:
        """(facts that hold where `node` is true, facts that hold where it is false); evaluates it once."""
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            true, false = self._test(node.operand, st)
            return false, true
        if isinstance(node, ast.BoolOp):
            parts = [self._test(v, st) for v in node.values]
            trues, falses = [p[0] for p in parts], [p[1] for p in parts]
            if isinstance(node.op, ast.And):
                return frozenset().union(*trues), _common(falses)
            return _common(trues), frozenset().union(*falses)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left = self._operand(node.left, st)
            right = self._operand(node.comparators[0], st)
            return self._compare(node.ops[0], (node.left, *left), (node.comparators[0], *right))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("all", "any")
            and len(node.args) == 1
            and not node.keywords
            and isinstance(node.args[0], (ast.GeneratorExp, ast.ListComp, ast.SetComp))
        ):
            inner = self._enter_generators(node.args[0].generators, st)
            true, false = self._test(node.args[0].elt, inner)
            return (true, _NO_FACTS) if node.func.id == "all" else (_NO_FACTS, false)
        self._expr(node, st)
        return _NO_FACTS, _NO_FACTS

    def _operand(self, node: ast.expr, st: State) -> tuple[bool, Value]:
        """(is it `len(X)`, the value of X or of the operand itself)."""
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "len"
            and len(node.args) == 1
            and not node.keywords
            and not isinstance(node.args[0], ast.Starred)
        ):
            return True, self._expr(node.args[0], st)
        return False, self._expr(node, st)

    def _compare(
        self, op: ast.cmpop, left: tuple[ast.expr, bool, Value], right: tuple[ast.expr, bool, Value]
    ) -> tuple[Facts, Facts]:
        true: set[tuple[int, str]] = set()
        false: set[tuple[int, str]] = set()
        for index, guard in enumerate(self.spec.guards):
            if guard.kind == EQUALS:
                for (_, is_len, value), (other, _, _) in ((left, right), (right, left)):
                    origins = {i.origin for i in labelled(value, guard.label) if i.key is None}
                    holds = None if is_len or not origins else _equality(op, other, guard.constant)
                    if holds is not None:
                        (true if holds else false).update((index, o) for o in origins)
            elif guard.kind == ONE_ELEMENT:
                for (_, is_len, value), (other, _, _), oriented in ((left, right, op), (right, left, _flip(op))):
                    if not (is_len and isinstance(other, ast.Constant) and type(other.value) is int):
                        continue
                    origins = {i.origin for i in labelled(value, guard.label)}
                    single = _at_most_one(oriented, other.value) if origins else None
                    if single is not None:
                        (true if single else false).update((index, o) for o in origins)
            elif guard.kind == SAME and not (left[1] or right[1]):
                common = {i.origin for i in labelled(left[2], guard.label)}
                common &= {i.origin for i in labelled(right[2], guard.label)}
                if common and isinstance(op, (ast.Eq, ast.Is)):
                    true.update((index, o) for o in common)
                elif common and isinstance(op, (ast.NotEq, ast.IsNot)):
                    false.update((index, o) for o in common)
        return frozenset(true), frozenset(false)


def _flip(op: ast.cmpop) -> ast.cmpop:
    flipped = _FLIP.get(type(op))
    return flipped() if flipped is not None else op


def _text(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_text(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_text(node.func)}(...)"
    if isinstance(node, ast.Subscript):
        return f"{_text(node.value)}[...]"
    return "..."


_STATEMENTS: dict[type, Callable[..., State | None]] = {
    ast.Assign: FlowWalker._assign,
    ast.AugAssign: FlowWalker._augassign,
    ast.AnnAssign: FlowWalker._annassign,
    ast.Expr: FlowWalker._expr_stmt,
    ast.If: FlowWalker._if,
    ast.While: FlowWalker._while,
    ast.For: FlowWalker._for,
    ast.AsyncFor: FlowWalker._for,
    ast.With: FlowWalker._with,
    ast.AsyncWith: FlowWalker._with,
    ast.Return: FlowWalker._return,
    ast.Raise: FlowWalker._raise,
    ast.Assert: FlowWalker._assert,
    ast.Try: FlowWalker._try,
    ast.Match: FlowWalker._match,
    ast.Break: FlowWalker._break,
    ast.Continue: FlowWalker._continue,
    ast.Delete: FlowWalker._delete,
    ast.FunctionDef: FlowWalker._nested,
    ast.AsyncFunctionDef: FlowWalker._nested,
    ast.ClassDef: FlowWalker._nested,
    ast.Pass: FlowWalker._skip,
    ast.Import: FlowWalker._skip,
    ast.ImportFrom: FlowWalker._skip,
    ast.Global: FlowWalker._skip,
    ast.Nonlocal: FlowWalker._skip,
}
if hasattr(ast, "TryStar"):  # Python 3.11+
    _STATEMENTS[ast.TryStar] = FlowWalker._try

_EXPRESSIONS: dict[type, Callable[..., Value]] = {
    ast.Name: FlowWalker._name,
    ast.Attribute: FlowWalker._attribute,
    ast.Subscript: FlowWalker._subscript,
    ast.Call: FlowWalker._call,
    ast.BinOp: FlowWalker._binop,
    ast.UnaryOp: FlowWalker._unaryop,
    ast.BoolOp: FlowWalker._boolop,
    ast.IfExp: FlowWalker._ifexp,
    ast.NamedExpr: FlowWalker._namedexpr,
    ast.Dict: FlowWalker._dict,
    ast.List: FlowWalker._sequence,
    ast.Tuple: FlowWalker._sequence,
    ast.Set: FlowWalker._sequence,
    ast.ListComp: FlowWalker._comprehension,
    ast.SetComp: FlowWalker._comprehension,
    ast.GeneratorExp: FlowWalker._comprehension,
    ast.DictComp: FlowWalker._comprehension,
    ast.Lambda: FlowWalker._lambda,
    ast.Await: FlowWalker._await,
}
