"""The main-process half of the rules on the evaluator (SG101, SG103, SG105, SG201): the question a rule asks
about one file, with the whole project readable, and what it needs to ask it.

A rule's `judge(question)` evaluates the file's functions with the evaluator (specguard/evaluation) and returns
`Judgement`s: plain data that travel with the file's facts to its worker, where the rule's `check` turns the
decided ones into findings (and fixes). Undecided sites are counted by the engine (`--statistics`, `-v`).
Nothing here imports libcst: the main process never needs it.
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from specguard.evaluation.budget import FILE_STEPS, FILE_WORK, RULES_WORK, Budget, OutOfBudget
from specguard.evaluation.evaluator import Evaluator
from specguard.evaluation.hooks import Hooks
from specguard.evaluation.instances import InstanceAttributes, assigned_on_self
from specguard.evaluation.objects import declares_record
from specguard.evaluation.paths import Frame
from specguard.evaluation.program import Program
from specguard.evaluation.values import (
    NOT_HANDLED,
    STAR_KWARGS,
    UNKNOWN,
    Bound,
    ClassRef,
    Function,
    Label,
    Many,
    Mapping,
    Method,
    Obj,
    Opaque,
    Partial,
    plain,
    with_labels,
)
from specguard.file_facts import FileFacts
from specguard.findings import Judgement
from specguard.packs import FRAMEWORK_PACKS, Pack
from specguard.program.ast_tools import FUNCTIONS, cached_on, dotted, has_decorator, same_scope, span, walked
from specguard.program.tree import ClassInfo, ParsedModule, SourceTree, read_class

BUDGET = 40_000  # evaluation steps per function a rule asks about; more is "not decided (budget)"
# with every evaluation of one file together within `budget.FILE_STEPS` and `budget.FILE_WORK`
MAX_DEPTH = 4  # calls followed from a function into helpers of helpers
__all__ = ["BUDGET", "MAX_DEPTH", "OutOfBudget", "Question", "Scope", "Judgement"]


@functools.lru_cache(maxsize=256)
def _words(names: frozenset[str]) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b")


def called_as(node: ast.Call, paths: Iterable[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The first of `paths` whose parts end the call's dotted name (`model.forward` in
    `model_runner.model.forward(...)`), or None."""
    called = tuple((dotted(node.func) or "").split("."))
    return next((path for path in paths if called[-len(path) :] == path), None)


def words(names: set[str] | frozenset[str]) -> re.Pattern[str]:
    """A pattern that finds any of these names as a whole word."""
    return _words(frozenset(names))


@dataclass(frozen=True, eq=False)
class Scope:
    """A function not nested in another: a module-level function or a method of a class at any depth."""

    qualname: str
    class_name: str | None  # the class's __qualname__
    cls: ClassInfo | None
    node: ast.FunctionDef | ast.AsyncFunctionDef
    module: ParsedModule

    @property
    def function(self) -> Function:
        return Function(self.module, self.node, self.cls)

    @property
    def bound(self) -> bool:
        return self.cls is not None and not has_decorator(self.node, "staticmethod")

    @property
    def parameters(self) -> list[ast.arg]:
        a = self.node.args
        params = [*a.posonlyargs, *a.args]
        return [*(params[1:] if self.bound else params), *a.kwonlyargs]

    @cached_property
    def text(self) -> str:
        return definition_text(self.module, self.node)

    def mentions(self, names: set[str]) -> bool:
        """Whether the function's text names any of these as a word: a cheap preselection, by reading."""
        return bool(names) and words(names).search(self.text) is not None


@dataclass
class Question:
    """One file a rule judges: its parsed module, its facts, the pack, and the project around it."""

    path: str
    module: ParsedModule
    facts: FileFacts
    pack: Pack
    program: Program
    instances: dict[Any, InstanceAttributes] = field(default_factory=dict)
    # what every evaluation of this file spends, together (see `budget.FILE_STEPS`)
    budget: Budget = field(default_factory=lambda: Budget(FILE_STEPS, FILE_WORK, what="file's evaluations"))
    latest: Budget | None = None  # the budget of the evaluation made last (what a rule that ran out says)

    @cached_property
    def scopes(self) -> list[Scope]:
        return list(_scopes(self.module, self.module.tree.body, None, "", methods=True))

    def instance_attributes(self, key: Any, constructed: bool = False) -> InstanceAttributes:
        """What instance attributes hold, shared by the rules of this file that ask with the same key (and, for
        `constructed`, read constructors as a whole: see `InstanceAttributes`)."""
        if key not in self.instances:
            self.instances[key] = InstanceAttributes(self.program, constructed)
        return self.instances[key]

    def evaluator(self, hooks: Hooks, **options: Any) -> Evaluator:
        options = {"budget": BUDGET, "max_depth": MAX_DEPTH, **options}
        made = Evaluator(self.program, hooks=hooks, within=self.budget, **options)
        self.latest = made.meter
        return made

    def self_value(self, scope: Scope, labels: frozenset[Label] = frozenset()) -> Any:
        """The instance (or, for a classmethod, the class) a method runs on."""
        if scope.cls is None or not scope.bound:
            return None
        if has_decorator(scope.node, "classmethod"):
            return ClassRef(scope.cls)
        return Obj(self._mixed_into(scope.cls, scope.node), label="self", labels=labels)

    def _mixed_into(self, cls: ClassInfo, method: ast.AST) -> ClassInfo:
        """The class whose instance a method runs on: its own; for a mixin's (a class with no base whose method
        uses what it does not have) the one class that mixes it in, whose attributes those uses reach (`class
        Backend(DcpDecodeMixin, MLABackend)`): where the method calls a method of `self` that the class does not
        define, the one class of its module below it; where it uses any attribute the class neither defines nor
        assigns, the one class of the project that names it beside another base."""
        if cls.bases:
            return cls
        if self_calls(method) - cls.methods.keys():
            users = [k for k in self.module.classes.values() if k != cls and cls in self.program.ancestors(k)]
            if len(users) == 1:
                return users[0]
        if self_attributes_used(method) - cls.methods.keys() - cls.attributes.keys() - _own(cls):
            named = {(module, user) for mixin, module, user in self.facts.mixed_into if mixin == cls.name}
            users = [
                found
                for module, user in sorted(named)
                if isinstance(found := self.program.resolve(module, user), ClassInfo)
            ]
            if len(users) == 1:
                return users[0]
        return cls

    def judgement(self, code: str, scope: Scope, node: ast.AST, message: str, **details: str) -> Judgement:
        return Judgement(code, scope.qualname, span(node), True, message, details=tuple(sorted(details.items())))

    def undecided(self, code: str, scope: Scope, node: ast.AST, what: str, why: str) -> Judgement:
        return Judgement(code, scope.qualname, span(node), False, what, why)

    def out_of_budget(self, code: str, scope: Scope, what: str = "the function") -> Judgement:
        if self.budget.steps <= 0 or self.budget.work <= 0:
            why = f"the file's evaluations spent their budget ({FILE_STEPS:,} steps, {FILE_WORK:,} elements)"
        elif self.latest is not None and self.latest.work < 0:
            why = f"its evaluation built or touched too much data ({RULES_WORK:,} elements)"
        else:
            why = f"its evaluation ran out of budget ({BUDGET:,} steps)"
        return self.undecided(code, scope, scope.node, what, why)


def _scopes(
    module: ParsedModule, body: list[ast.stmt], cls: ClassInfo | None, prefix: str, methods: bool
) -> Iterator[Scope]:
    for stmt in same_scope(body):
        if isinstance(stmt, FUNCTIONS):
            if methods:
                qualname = f"{prefix}{stmt.name}"
                yield Scope(qualname, prefix[:-1] if cls is not None else None, cls, stmt, module)
            yield from _scopes(module, stmt.body, None, f"{prefix}{stmt.name}.<locals>.", methods=False)
        elif isinstance(stmt, ast.ClassDef):
            qualname = prefix + stmt.name
            info = module.classes.get(stmt.name)
            if info is None or info.node is not stmt:
                info = read_class(module, stmt)
            yield from _scopes(module, stmt.body, info, qualname + ".", methods=True)


# ---- what a callee value denotes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Callee:
    """The function a call reaches, as the evaluator resolved it: its name, whether it is a method (of the instance
    or of some object) or a module-level function, its definition when the project has it, and the arguments a
    `functools.partial` around it bound."""

    name: str
    method: bool
    function: Function | None
    bound: bool = False  # the instance (or class) is passed implicitly: the first parameter is not in `args`
    partial_args: tuple[Any, ...] = ()
    partial_kwargs: tuple[tuple[str, Any], ...] = ()
    partial_nodes: tuple[tuple[str, ast.AST], ...] = ()


def callee(func: Any) -> Callee | None:
    func = plain(func)
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}
    nodes: dict[str, ast.AST] = {}
    while isinstance(func, Partial):
        args = (*func.args, *args)
        kwargs = {**func.kwargs, **kwargs}
        nodes = {**func.nodes, **nodes}
        func = plain(func.func)
    extra = (args, tuple(kwargs.items()), tuple(nodes.items()))
    if isinstance(func, Bound):
        static = has_decorator(func.func.node, "staticmethod") if not isinstance(func.func.node, ast.Lambda) else True
        return Callee(func.func.name, True, func.func, not static, *extra)
    if isinstance(func, Function):
        return Callee(func.name, func.owner is not None, func, False, *extra)
    if isinstance(func, Opaque):
        return Callee(func.name.rpartition(".")[2], False, None, False, *extra)
    if isinstance(func, Method):
        receiver = plain(func.receiver)
        if isinstance(receiver, (Obj, ClassRef)) and (isinstance(receiver, ClassRef) or receiver.label == "self"):
            return Callee(func.name, True, None, True, *extra)  # a method of the instance whose class we cannot read
    return None


def bind_arguments(
    target: Callee, args: list[Any], kwargs: dict[str, Any], node: ast.Call
) -> dict[str, tuple[Any, ast.AST | None, str]]:
    """parameter -> (value, the argument node, how it was passed: "" keyword or position, "*", "**"). Positions map
    to parameters only where the project defines the callee; otherwise keywords only."""
    all_args = [*target.partial_args, *args]
    all_kwargs = {**dict(target.partial_kwargs), **kwargs}
    nodes = dict(target.partial_nodes)
    out: dict[str, tuple[Any, ast.AST | None, str]] = {}
    keyword_nodes = {kw.arg: kw for kw in node.keywords if kw.arg}
    spread = next((kw for kw in node.keywords if kw.arg is None), None)
    for name, value in all_kwargs.items():
        if name == STAR_KWARGS:
            continue
        passed = keyword_nodes.get(name) or nodes.get(name)
        out[name] = (value, passed if passed is not None else spread, "" if passed is not None else "**")
    mapping = plain(all_kwargs.get(STAR_KWARGS))
    key = plain(mapping.key) if isinstance(mapping, Mapping) else None
    if isinstance(key, str) and key not in out:  # a dict of one known key, on some paths only (`if` in a dict comp)
        out[key] = (with_labels(mapping.value, mapping.labels), spread, "**")  # type: ignore[union-attr]
    if target.function is not None and not isinstance(target.function.node, ast.Lambda):
        spec = target.function.node.args
        params = [p.arg for p in (*spec.posonlyargs, *spec.args)]
        if target.bound and params:
            params = params[1:]
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        starred = any(isinstance(a, ast.Starred) for a in node.args)
        for index, value in enumerate(all_args):
            if index < len(params) and params[index] not in out:
                offset = index - len(target.partial_args)
                arg_node = positional[offset] if 0 <= offset < len(positional) and not starred else None
                out[params[index]] = (value, arg_node or node, "*" if starred else "")
    return out


Parameter = Callable[[ast.arg, Frame], Any]


def bind_parameters(function: Function, me: Any, parameter: Parameter, tree: SourceTree) -> dict[str, Any]:
    """The values a function is evaluated with on its own: `me` for its first parameter when it is a method, and
    `parameter(arg, frame)` for the others (what the client's pack says a parameter of that name or annotation
    is, unknown otherwise). A method's parameter left unannotated is as the method it overrides annotates it
    (`def prepare_attn(self, input_batch, cudagraph_mode, ...)` over a base's `cudagraph_mode: CUDAGraphMode`),
    read in the base's module."""
    node = function.node
    a = node.args  # type: ignore[union-attr]
    params = [*a.posonlyargs, *a.args]
    frame = Frame(function.module, function.owner, None, 0)
    inherited = inherited_annotations(tree, function)
    out: dict[str, Any] = {}
    if me is not None and params:
        out[params[0].arg] = me
        params = params[1:]
    for param in [*params, *a.kwonlyargs]:
        if param.annotation is None and param.arg in inherited:
            base_param, base_frame = inherited[param.arg]
            out[param.arg] = parameter(base_param, base_frame)
        else:
            out[param.arg] = parameter(param, frame)
    if a.vararg is not None:
        out[a.vararg.arg] = Many(UNKNOWN)
    if a.kwarg is not None:
        out[a.kwarg.arg] = UNKNOWN
    return out


def inherited_annotations(tree: SourceTree, function: Function) -> dict[str, tuple[ast.arg, Frame]]:
    """Parameter name -> the nearest overridden method's annotated parameter of that name, with its frame."""
    owner, name = function.owner, getattr(function.node, "name", "")
    if owner is None:
        return {}
    out: dict[str, tuple[ast.arg, Frame]] = {}
    for klass in tree.ancestors(owner)[1:]:
        base = klass.methods.get(name)
        module = tree.module(klass.module) if base is not None else None
        if base is None or module is None:
            continue
        b = base.args
        for param in [*b.posonlyargs, *b.args, *b.kwonlyargs]:
            if param.annotation is not None and param.arg not in out:
                out[param.arg] = (param, Frame(module, klass, None, 0))
    return out


def writes_of(
    q: Question,
    hooks: Hooks,
    function: Function,
    me: Obj,
    parameter: Parameter,
    writes: dict | None = None,
    own_calls: bool = False,
) -> list[tuple[Any, dict]]:
    """A method that writes an instance attribute, run on its own (calls in it followed one level deep) from the
    instance's state `writes` (of an earlier call, or none): what each of its paths leaves written. What it assigns
    that cannot write the instance is evaluated when read, so an attribute costs only the statements it needs."""
    ev = q.evaluator(hooks, max_depth=1, inline_unused=False)
    ev.lazy_owner, ev.own_calls = me, own_calls
    try:
        flow = ev.run(function, bind_parameters(function, me, parameter, q.program), writes=writes)
    except (OutOfBudget, RecursionError):
        return []
    return [(value, state.writes) for state, value in flow.returns]


def constructor_refuses(q: Question, scope: Scope, hooks: Callable[[], Hooks], setting: str) -> bool:
    """Whether `scope` is a method of a class whose constructor, the one an instance runs, raises on every path where
    the hooks say `setting` is on (`if get_parallel().attn_dcp_size > 1: raise ValueError(...)`): no instance then
    runs with it on, the only case a rule about that setting asks about. By the constructor's own statements and
    the functions of its own package it calls (`refuse_dcp("component")`, two calls deep), evaluated once per class
    and setting (`hooks` makes the rule's hooks for that one evaluation): a framework's code it calls is not read (a
    base's constructor may fail for reasons the evaluation cannot see, which is no refusal)."""
    cls = scope.cls
    if cls is None or not scope.bound:
        return False
    key = ("constructor-refuses", setting, cls.key)
    if key not in q.program.memo:
        init = next(((k, k.methods["__init__"]) for k in q.program.ancestors(cls) if "__init__" in k.methods), None)
        module = q.program.module(init[0].module) if init is not None else None
        refuses = False
        if init is not None and module is not None:
            function = Function(module, init[1], init[0])
            bindings = bind_parameters(function, Obj(cls, label="self"), unknown_parameter, q.program)
            try:
                refuses = not q.evaluator(_own_calls_only(q, hooks()), max_depth=2).run(function, bindings).returns
            except (OutOfBudget, RecursionError):
                refuses = False
        q.program.memo[key] = refuses
    return q.program.memo[key]  # type: ignore[no-any-return]


def _own_calls_only(q: Question, hooks: Hooks) -> Hooks:
    """The rule's hooks, with every call of a function outside the judged module's own package left unread."""
    answer = hooks.call

    def call(ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call, *rest: Any) -> Any:
        answered = answer(ev, func, args, kwargs, node, *rest)  # the rule's answer first (`require_mlp_sync()`)
        target = callee(func)
        outside = target is not None and target.function is not None and not own_module(q, target.function.module.name)
        if answered is NOT_HANDLED and outside:
            return UNKNOWN
        return answered

    hooks.call = call  # type: ignore[method-assign]
    return hooks


def self_attributes_used(method: ast.AST) -> frozenset[str]:
    """The attributes a function reads or calls on `self` (`self.dcp_size`, `self._local(...)`), read once per
    function."""
    return cached_on(method, "self_attributes_used", _read_self_attributes)  # type: ignore[no-any-return]


def _read_self_attributes(method: ast.AST) -> frozenset[str]:
    return frozenset(
        n.attr
        for n in walked(method)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Load)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
    )


def _own(cls: ClassInfo) -> frozenset[str]:
    """The attributes a class's own methods assign on their instance."""
    return frozenset().union(*(assigned_on_self(method) for method in cls.methods.values()))


def self_calls(method: ast.AST) -> frozenset[str]:
    """The methods a function calls on `self` (`self._run_decode_kernel(...)`), read once per function."""
    return cached_on(method, "self_calls", _read_self_calls)  # type: ignore[no-any-return]


def _read_self_calls(method: ast.AST) -> frozenset[str]:
    return frozenset(
        n.func.attr
        for n in walked(method)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "self"
    )


def unknown_parameter(param: ast.arg, frame: Frame) -> Any:
    return UNKNOWN


def annotated_parameter(ev: Evaluator) -> Parameter:
    """Parameters bound to what their annotations promise (an instance of a class of the tree, a list of them),
    unknown in value."""

    def bind(param: ast.arg, frame: Frame) -> Any:
        value = ev.annotated_value(param.annotation, frame) if param.annotation is not None else NOT_HANDLED
        return UNKNOWN if value is NOT_HANDLED else value

    return bind


def leading_call(q: Question, scope: Scope, ev: Any, node: ast.Call, frame: Frame) -> tuple[ast.expr, bool] | None:
    """The call written in `scope` that is the call at `node`, or that leads to it through the functions the
    evaluation followed (a property's read is a call written as an attribute): (that call, whether it is `node`
    itself); None where the scope's own code does not."""
    if frame.module is q.module and inside(scope.node, node):
        return node, True
    outer = ev.calls[0] if ev.calls else None
    return (outer, False) if isinstance(outer, (ast.Call, ast.Attribute)) and inside(scope.node, outer) else None


def called_text(call: ast.expr) -> str:
    """What a call written in the code calls, as written (a property read: the attribute)."""
    return ast.unparse(call.func if isinstance(call, ast.Call) else call)[:60]


def inside(outer: ast.AST, node: ast.AST) -> bool:
    first, last = getattr(outer, "lineno", 0), getattr(outer, "end_lineno", 0) or 0
    return first <= getattr(node, "lineno", -1) <= last


def definition_text(module: ParsedModule | None, node: ast.AST) -> str:
    """The lines of a definition as written in its module."""
    lines = getattr(module, "lines", [])
    return "\n".join(lines[node.lineno - 1 : node.end_lineno or node.lineno])  # type: ignore[attr-defined]


def reaching_imports(q: Question, names: set[str]) -> set[str]:
    """Functions this module imports from the tree that name one of `names`, or call a function of their module
    that does (however deep), modules of the tree it imports whole that define one, and the methods of classes it
    imports that do (a holder object's `refresh`): a function calling one may reach them through it (a
    preselection by reading, as `Scope.mentions` is; the evaluation decides)."""
    found = set()
    pattern = words(names)
    reaching: dict[str, set[str]] = {}  # a module's functions that reach, once per module however many it exports

    def reaching_in(module: ParsedModule) -> set[str]:
        return _functions_reaching(module, pattern, reaching)

    inherited = {dotted(base) for cls in q.module.classes.values() for base in cls.bases}
    for local, target in q.facts.imports:
        resolved = q.program.resolve(q.module.name, local)
        if isinstance(resolved, str):  # `from pkg import module`, `import pkg.module as m`
            text = q.program.module_text(resolved)  # parsed only where its text could reach
            module = q.program.module(resolved) if text is not None and pattern.search(text) else None
            if module is not None and reaching_in(module):
                found.add(local)
            continue
        if isinstance(resolved, ClassInfo) and target.rpartition(".")[2] not in names:
            owner = q.program.module(resolved.module)
            if owner is not None and local not in inherited:  # a base's methods are `reaching_methods`'
                texts = {name: definition_text(owner, node) for name, node in resolved.methods.items()}
                seeds = _calling(texts, reaching_in(owner))  # a method calling a function of its module that does
                found |= {name for name in _reaching(texts, pattern, seeds) if not _dunder(name)}
            continue
        function = isinstance(resolved, tuple) and isinstance(resolved[1], (ast.FunctionDef, ast.AsyncFunctionDef))
        if function and target.rpartition(".")[2] not in names:
            module, node = resolved  # type: ignore[misc]
            if node.name in reaching_in(module):
                found.add(local)
    return found


def reaching_functions(q: Question, pattern: re.Pattern[str]) -> set[str]:
    """Module-level functions of this module whose text `pattern` finds, or that name such a function, however
    many lie between (a preselection by reading; the evaluation decides)."""
    return _reaching({name: definition_text(q.module, node) for name, node in q.module.functions.items()}, pattern)


def _dunder(name: str) -> bool:
    """`__init__`, `__post_init__`: named by every subclass's `super()` call, never a holder's own work."""
    return name.startswith("__") and name.endswith("__")


def _functions_reaching(module: ParsedModule, pattern: re.Pattern[str], known: dict[str, set[str]]) -> set[str]:
    """The module-level functions of `module` that reach `pattern` (see `_reaching`), kept in `known` per module."""
    if module.name not in known:
        texts = {name: definition_text(module, node) for name, node in module.functions.items()}
        known[module.name] = _reaching(texts, pattern)
    return known[module.name]


def _calling(texts: dict[str, str], functions: set[str]) -> set[str]:
    """The names whose text names one of `functions`."""
    if not functions:
        return set()
    pattern = words(functions)
    return {name for name, text in texts.items() if pattern.search(text)}


def _reaching(texts: dict[str, str], pattern: re.Pattern[str], seeds: set[str] | None = None) -> set[str]:
    """The names whose text `pattern` finds (or in `seeds`), or that name one that does, however many lie
    between."""
    found = {name for name, text in texts.items() if pattern.search(text)} | (seeds or set())
    while found:
        calls_one = words(found)
        grown = found | {name for name, text in texts.items() if name not in found and calls_one.search(text)}
        if grown == found:
            break
        found = grown
    return found


def is_batch_class(q: Question, cls: ClassInfo) -> bool:
    """Whether a class of the tree is a batch as `[batches] batch_types` names one: it or one of its ancestors."""
    return any(k.name in q.pack.batches.batch_types for k in q.program.ancestors(cls))


def own_module(q: Question, module: str) -> bool:
    """Whether `module` is of the judged module's own package, not of a framework's."""
    top = module.partition(".")[0]
    return top == q.module.name.partition(".")[0] and top not in FRAMEWORK_PACKS


def own_class(q: Question, cls: ClassInfo | None) -> bool:
    """A class of the judged module's own package, not of a framework's (whose base classes, `AttentionBackend`,
    say nothing of which backend an instance holds)."""
    return cls is not None and own_module(q, cls.module)


def annotated_own_class(q: Question, module: str, annotation: ast.expr | None) -> ClassInfo | None:
    """The class of the judged module's own package that an annotation names (`backend: VendorBackend`, or the
    forward reference `"VendorBackend"`), else None; never an enum (`plan_mode: PlanMode` is a setting, whose
    value its constructor chooses)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if not isinstance(annotation, (ast.Name, ast.Attribute)):
        return None
    key = ("own-class", q.module.name, module, dotted(annotation) or "")
    if key not in q.program.memo:  # (a thousand classes of one file annotate `vllm_config: VllmConfig` alike)
        cls = q.program.resolve_class(module, key[3])
        q.program.memo[key] = cls if cls is not None and own_class(q, cls) and not q.program.is_enum(cls) else None
    return q.program.memo[key]  # type: ignore[no-any-return]


def held_classes(q: Question, built: bool = False) -> tuple[ClassInfo, ...]:
    """The own package's classes whose instances the module's classes keep from their constructors' annotated
    parameters, and with `built` those their constructors build (see `held_instance`)."""
    key = ("held-classes", q.module.name, built)
    if key not in q.program.memo:
        held: dict[int, ClassInfo] = {}
        for cls in q.module.classes.values():
            init = cls.methods.get("__init__")
            if init is None:
                continue
            found = [annotated_own_class(q, cls.module, param.annotation) for param in init.args.args[1:]]
            if built:
                made = [annotated_own_class(q, cls.module, call.func) for _, call in _built_components(init)]
                found += [c for c in made if c is not None and _component(q, c)]
            held.update((id(c), c) for c in found if c is not None)
        q.program.memo[key] = tuple(held.values())
    return q.program.memo[key]  # type: ignore[no-any-return]


def held_instance(q: Question, cls: ClassInfo, attr: str, built: bool = False) -> ClassInfo | None:
    """The own package's class of what an instance keeps as `self.<attr>` where its constructor (its class's or a
    base's, the nearest) stores there a parameter annotated with that class (`self.strategy = strategy`), or with
    `built`, an instance of a component class of the package it builds (`self.padder = MlpSyncPadder(runner)`:
    a class with methods, no record, whose methods run on it), else None."""
    key = ("held-instance", q.module.name, cls.key, attr, built)
    if key not in q.program.memo:
        init = next((k for k in q.program.ancestors(cls) if "__init__" in k.methods), None)
        q.program.memo[key] = _kept_parameter_class(q, init, attr, built) if init is not None else None
    return q.program.memo[key]  # type: ignore[no-any-return]


def _kept_parameter_class(q: Question, klass: ClassInfo, attr: str, built: bool) -> ClassInfo | None:
    init = klass.methods["__init__"]
    params = {p.arg: p.annotation for p in init.args.args[1:] + init.args.kwonlyargs}
    for node in walked(init):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and node.value.id in params
            and any(dotted(t) == f"self.{attr}" for t in node.targets)
        ):
            return annotated_own_class(q, klass.module, params[node.value.id])
    for target, call in _built_components(init) if built else ():
        found = annotated_own_class(q, klass.module, call.func)
        if target == f"self.{attr}" and found is not None and _component(q, found):
            return found
    return None


def _built_components(init: ast.AST) -> Iterator[tuple[str, ast.Call]]:
    """`self.<attr> = SomeClass(...)` in a constructor: the target and the call."""
    for node in walked(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
            target = dotted(node.targets[0]) or ""
            if target.startswith("self.") and isinstance(node.value.func, (ast.Name, ast.Attribute)):
                yield target, node.value


def _component(q: Question, cls: ClassInfo) -> bool:
    """A class whose instances do work (a method beside its constructor) and are no record of settings (no class of
    its lineage a dataclass, named tuple or the like, whose fields other code may set)."""
    return not any(declares_record(k) for k in q.program.ancestors(cls)) and any(n != "__init__" for n in cls.methods)


def reaching_methods(q: Question, pattern: re.Pattern[str], held: tuple[ClassInfo, ...] = ()) -> set[str]:
    """Methods the classes of this module (and the `held` classes, whose instances they keep) have or inherit (from
    any module of the tree, the speculator bases and the shared helpers aside) whose text `pattern` finds, or names
    such a method: a method calling one may reach what they call, however many of them lie between (a preselection
    by reading; the evaluation decides)."""
    skip = set(q.pack.speculators.bases)
    helpers = set(q.pack.speculators.shared_helpers)
    texts: dict[str, str] = {}
    seeds: set[str] = set()  # methods calling a function of their own module that reaches (a mixin's helper)
    by_module: dict[str, set[str]] = {}
    # (a class with no method of its own counts: what it inherits is what a mixin of the module calls on `self`)
    classes = {id(s.cls): s.cls for s in q.scopes if s.cls is not None} | {id(c): c for c in q.module.classes.values()}
    classes |= {id(c): c for c in held}
    seen: set[tuple[str, str]] = set()
    for cls in classes.values():
        for klass in q.program.ancestors(cls):
            if klass.key in seen or klass.name in skip:
                continue
            seen.add(klass.key)
            module = q.program.module(klass.module)
            own = {name: definition_text(module, node) for name, node in klass.methods.items() if name not in helpers}
            seeds |= _calling(own, _functions_reaching(module, pattern, by_module) if module is not None else set())
            for name, text in own.items():
                texts[name] = texts.get(name, "") + "\n" + text
    return _reaching(texts, pattern, seeds)


def aliases(q: Question, names: set[str]) -> set[str]:
    """The names a module binds to any of `names` (imported as another name, a local or an attribute assigned an
    expression that uses one as a value, e.g. a `functools.partial` of it), found by reading: a preselection."""
    found = set(names) | {local for local, target in q.facts.imports if target.rpartition(".")[2] in names}
    lines = getattr(q.module, "lines", [])
    grew = True
    while grew:
        grew = False
        used = re.compile(words(found).pattern + r"(?!\s*\()")  # as a value, not called
        hits = [number for number, line in enumerate(lines, 1) if used.search(line)]
        for stmt in _statements_at(q.module.tree.body, hits):
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
                    if name and name not in found:
                        found.add(name)
                        grew = True
    return found


def _statements_at(body: list[ast.stmt], lines: list[int]) -> Iterator[ast.stmt]:
    """The statements, at any depth (in functions and classes too), whose lines hold one of `lines` (sorted)."""
    for stmt in body:
        first = bisect.bisect_left(lines, stmt.lineno)
        if first == len(lines) or lines[first] > (stmt.end_lineno or stmt.lineno):
            continue
        yield stmt
        for block in _child_blocks(stmt):
            yield from _statements_at(block, lines)


def _child_blocks(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list):
            yield block
    for holder in (*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())):
        yield holder.body
