"""One serving config as the config objects vLLM's code receives, and where in the served source it leads.

`Situation` builds the objects the evaluator (`flow`) hands to vLLM functions: a VllmConfig whose sections
carry the values the serving config fixes (every option it sets lands in the section field of that name), the
defaults the source declares for the rest, and UNKNOWN for what vLLM computes in a `__post_init__` or picks at
startup (the block size, the CUDA-graph mode when unset). An optional section nobody set on the command line is
None, as in vLLM.

`Reach` answers "does this config get to that statement?": it finds the statements (a raise, an assert or a
warning whose text contains a catalogue's evidence), the functions calling theirs (up to two levels, by name,
across the tree), and evaluates the callers with the call watched, then the function itself with the
arguments of each call.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from specguard.deploy.evaluator import config_evaluator
from specguard.deploy.facts import SourceFacts
from specguard.deploy.model import ServingConfig
from specguard.deploy.vllm_tree import CONFIG_PACKAGE
from specguard.evaluation import environment
from specguard.evaluation.budget import OutOfBudget
from specguard.evaluation.evaluator import Evaluator, own_nodes
from specguard.evaluation.paths import Frame, Outcome, State, Verdict, verdict
from specguard.evaluation.values import NOT_HANDLED, UNKNOWN, Bound, ClassRef, EnumMember, Function, Obj
from specguard.program.ast_tools import cached_on, walked
from specguard.program.tree import ClassInfo, ParsedModule, SourceTree, dotted, message_of

ENTRY_DECORATORS = {"field_validator", "model_validator", "model_serializer", "cached_property", "property"}
MAX_CALLER_FILES = 25


@dataclass(frozen=True)
class SiteRef:
    """A statement of the served source: where it is and the function it is in."""

    module: ParsedModule
    function: ast.FunctionDef | ast.AsyncFunctionDef
    owner: ClassInfo | None
    node: ast.AST
    message: str
    relpath: str

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)

    @property
    def where(self) -> str:
        return f"{self.relpath}:{self.line}"


class Situation:
    def __init__(self, cfg: ServingConfig, facts: SourceFacts, interleave: Any = None) -> None:
        self.cfg = cfg
        self.facts = facts
        self.tree = facts.tree
        # Every option the command line set, by dest: a section's field of the same name takes its value.
        self.given: dict[str, Any] = {**(cfg.model_extra or {}), **cfg.model_dump(exclude_none=True)}
        self._by_class: dict[str, Obj] = {}
        # A section's values before its __post_init__ (what evaluating __post_init__ itself starts from).
        self.raw: dict[str, dict[str, Any]] = {}
        # Config classes whose section the config leaves None: their methods never run.
        self.absent: set[str] = set()
        self.interleave = interleave
        self.derived = engine_derivations(self.tree, self.given)
        self.vllm = self._build(interleave)

    def config_class(self, name: str) -> ClassInfo | None:
        return self.tree.resolve_class(f"{self.tree.package}.{CONFIG_PACKAGE}", name)

    def enum_member(self, cls: ClassInfo | None, name: str | None) -> Any:
        if cls is None or name is None:
            return None if name is None else UNKNOWN
        return EnumMember(cls, name) if name in self.tree.enum_members(cls) else UNKNOWN

    def _section(
        self, cls: ClassInfo | str | None, modelled: dict[str, Any], given: dict[str, Any] | None = None
    ) -> Obj:
        """A config section: its declared defaults, what the config gives it, and UNKNOWN for the fields its
        `__post_init__` computes (unless given)."""
        label = cls if isinstance(cls, str) else ""
        if isinstance(cls, str):
            cls = self.config_class(cls)
        declared = {n for k in self.tree.ancestors(cls) for n in k.annotations} if cls is not None else set()
        source = self.given if given is None else given
        values = {k: v for k, v in source.items() if k in declared}
        # What EngineArgs.create_engine_config passes the section's constructor, as the served source computes it
        # (e.g. `_allow_auto_resolve_cp_interleave_size=(self.cp_kv_cache_interleave_size is None)`).
        if cls is not None and given is None:
            values.update({k: v for k, v in self.derived.get(cls.name, {}).items() if k in declared})
        values.update(modelled)
        label = label or (cls.name if cls is not None else "section")
        self.raw[label] = dict(values)
        for name in _post_init_fields(cls):
            values.setdefault(name, UNKNOWN)
        obj = Obj(cls, values, defaults=True, label=label)
        self._by_class[label] = obj
        return obj

    def _build(self, interleave: Any) -> Obj:
        cfg = self.cfg
        given_interleave = cfg.cp_kv_cache_interleave_size
        parallel_values: dict[str, Any] = {
            "tensor_parallel_size": cfg.tensor_parallel_size,
            "data_parallel_size": cfg.data_parallel_size,
            "decode_context_parallel_size": cfg.decode_context_parallel_size,
            "prefill_context_parallel_size": cfg.prefill_context_parallel_size,
        }
        if interleave is not None:
            parallel_values["cp_kv_cache_interleave_size"] = interleave
        elif given_interleave is not None:
            parallel_values["cp_kv_cache_interleave_size"] = given_interleave
        parallel = self._section("ParallelConfig", parallel_values)
        # vLLM picks the block size and the CUDA-graph mode at startup when the config does not set them.
        cache = self._section("CacheConfig", {"block_size": cfg.block_size if cfg.block_size is not None else UNKNOWN})
        backend_enum = self._backend_enum()
        attention = self._section("AttentionConfig", {"backend": self.enum_member(backend_enum, cfg.attention_backend)})
        compilation_cls = self.config_class("CompilationConfig")
        mode_enum = self.tree.field_enum(compilation_cls, "cudagraph_mode") if compilation_cls else None
        mode = self.enum_member(mode_enum, cfg.cudagraph_mode) if cfg.cudagraph_mode else UNKNOWN
        compilation = self._section("CompilationConfig", {"cudagraph_mode": mode})
        model = self._section("ModelConfig", {"enforce_eager": cfg.enforce_eager})
        sections: dict[str, Any] = {
            "parallel_config": parallel,
            "cache_config": cache,
            "attention_config": attention,
            "compilation_config": compilation,
            "model_config": model,
            "speculative_config": self._speculative(parallel, model, backend_enum),
            "kv_transfer_config": self._json_section("KVTransferConfig", cfg.kv_transfer_config),
        }
        vllm_cls = self.config_class("VllmConfig")
        options = {o.dest for o in self.facts.serve_options.options}
        for name, annotation in vllm_cls.annotations.items() if vllm_cls is not None else ():
            if name in sections:
                continue
            value = self.given.get(name)
            section_cls = next(iter(self.tree.classes_in(annotation, vllm_cls.module)), None)
            if isinstance(value, dict) and section_cls is not None:
                sections[name] = self._section(section_cls, {}, given=value)
            elif "None" in ast.unparse(annotation):
                # An optional section nobody set stays None, if the command line could have set it; vLLM
                # computes the others (quant_config from the model).
                sections[name] = None if name in options else UNKNOWN
            elif section_cls is not None:
                sections[name] = self._section(section_cls, {})
        return self._section("VllmConfig", sections, given={})

    def value_of(self, obj: Obj, attr: str) -> Any:
        """An attribute of a section as vLLM's code would read it (given, computed, or the declared default)."""
        return config_evaluator(self.tree).getattr(obj, attr, State({}, {}, frozenset()), 0)

    def _speculative(self, parallel: Obj, model: Obj, backend_enum: ClassInfo | None) -> Obj | None:
        spec = self.cfg.speculative_config
        if spec is None:
            self.absent.add("SpeculativeConfig")
            return None
        values = spec.model_dump(exclude_none=True)
        values["attention_backend"] = self.enum_member(backend_enum, spec.attention_backend)
        values["target_parallel_config"] = parallel
        values["target_model_config"] = model
        return self._section("SpeculativeConfig", values, given={})

    def _json_section(self, name: str, model: Any) -> Obj | None:
        if model is None:
            self.absent.add(name)
            return None
        return self._section(name, model.model_dump(), given={})

    def _backend_enum(self) -> ClassInfo | None:
        attention = self.config_class("AttentionConfig")
        return self.tree.field_enum(attention, "backend") if attention is not None else None

    # -- binding function parameters ---------------------------------------------------------------------------

    def object_for(self, cls: ClassInfo | None) -> Any:
        """The situation's object of a class (or of a class it derives from), if there is one."""
        if cls is None:
            return None
        for klass in self.tree.ancestors(cls):
            if klass.name in self._by_class:
                return self._by_class[klass.name]
        return None

    def bind(
        self,
        function: ast.FunctionDef | ast.AsyncFunctionDef,
        owner: ClassInfo | None,
        module: ParsedModule,
        defaults: bool = False,
    ) -> tuple[Any, dict[str, Any]]:
        """`self` and keyword arguments for an entry function, from parameter names and annotations.

        `defaults`: parameters with a default are left to it (a call that passes only the required ones)."""
        decorators = {
            (dotted(d.func if isinstance(d, ast.Call) else d) or "").rpartition(".")[2] for d in function.decorator_list
        }
        params = [*function.args.posonlyargs, *function.args.args]
        self_value: Any = None
        if owner is not None and params and "staticmethod" not in decorators:
            if "classmethod" in decorators:
                self_value = ClassRef(owner)
            else:
                self_value = self.object_for(owner) or self.stranger(owner)
            params = params[1:]
        kwargs: dict[str, Any] = {}
        validated = _validated_field(function) if owner is not None and "field_validator" in decorators else None
        if validated is not None and params:
            # pydantic calls it with the field's value and an info whose `data` holds the fields validated before
            # it (those declared earlier, bases first); the rest of its parameters as any entry's
            section = self.object_for(owner) or Obj(owner, {}, defaults=True, label=owner.name)
            read = _FieldReader(config_evaluator(self.tree), section, module)
            before = {f: read(f) for f in self._fields_before(owner, validated)}
            kwargs[params[0].arg] = read(validated)
            if len(params) > 1:
                kwargs[params[1].arg] = Obj(None, {"data": before, "field_name": validated}, label="ValidationInfo")
            params = params[2:]
        spec = function.args
        optional = {
            p.arg
            for p in [*spec.posonlyargs, *spec.args][len(spec.posonlyargs) + len(spec.args) - len(spec.defaults) :]
        }
        optional |= {p.arg for p, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=True) if d is not None}
        for param in [*params, *function.args.kwonlyargs]:
            if defaults and param.arg in optional:
                continue
            value = self._by_annotation(param.annotation, module)
            kwargs[param.arg] = value if value is not UNKNOWN else self._by_name(param.arg)
        return self_value, kwargs

    def _fields_before(self, owner: ClassInfo, name: str) -> list[str]:
        """The fields of `owner` declared before `name`, bases' first, as dataclasses order them."""
        order: list[str] = []
        for klass in reversed(list(self.tree.ancestors(owner))):
            order += [f for f in klass.annotations if f not in order]
        return order[: order.index(name)] if name in order else []

    def stranger(self, cls: ClassInfo) -> Obj:
        """An object of a class the config does not describe (an engine core, a worker): its `vllm_config` is
        the config's, as everywhere in vLLM; the rest is unknown."""
        return Obj(cls, {"vllm_config": self.vllm}, defaults=True, label=cls.name)

    def fresh(self, obj: Obj) -> Obj:
        """The section as its constructor receives it: the user's values and the class defaults, before the
        `__post_init__` computes the rest (evaluating `__post_init__` itself starts from this)."""
        return Obj(obj.cls, dict(self.raw.get(obj.label, obj.fields)), defaults=True, label=obj.label)

    def _by_name(self, name: str) -> Any:
        """vLLM names its config parameters after the sections (`vllm_config`, `parallel_config`, ...)."""
        if name == "vllm_config":
            return self.vllm
        return self.vllm.fields.get(name, UNKNOWN) if name.endswith("_config") else UNKNOWN

    def _by_annotation(self, annotation: ast.expr | None, module: ParsedModule) -> Any:
        if annotation is None:
            return UNKNOWN
        text = annotation.value if isinstance(annotation, ast.Constant) else ast.unparse(annotation)
        name = str(text).split("|")[0].strip().strip("'\"").rpartition(".")[2]
        return self._by_class.get(name, UNKNOWN)


ENGINE_ARGS = ("engine/arg_utils.py", "EngineArgs", "create_engine_config")
_PLAIN = (int, float, str, bool, type(None))


def engine_derivations(tree: SourceTree, given: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Config class name -> the keyword values `EngineArgs.create_engine_config` constructs it with, evaluated with
    the parsed options as the EngineArgs fields (those every path agrees on; what vLLM computes from the model or
    the GPU stays out). Computed once per tree, set of options and serving environment."""
    key = ("derived", repr(sorted(given.items(), key=lambda kv: kv[0])))
    return environment.memoized(tree.memo, key, lambda: _engine_derivations(tree, given))


def _engine_derivations(tree: SourceTree, given: dict[str, Any]) -> dict[str, dict[str, Any]]:
    module = tree.module_for_path(ENGINE_ARGS[0])
    cls = module.classes.get(ENGINE_ARGS[1]) if module is not None else None
    found = tree.method(cls, ENGINE_ARGS[2]) if cls is not None else None
    if module is None or cls is None or found is None:
        return {}
    method, owner = found
    config_package = f"{tree.package}.{CONFIG_PACKAGE}"

    def hook(ev: Evaluator, func: Any, args: Any, kwargs: Any, node: ast.AST, frame: Any, state: State) -> Any:
        if isinstance(func, ClassRef) and func.info.module.startswith(config_package):
            ev.record("construct", frame.module, node, func.info.name, state.path, kwargs)
            return UNKNOWN
        return NOT_HANDLED

    engine = Obj(cls, {k: v for k, v in given.items() if isinstance(v, (*_PLAIN, list, dict))}, defaults=True)
    ev = config_evaluator(tree, hook=hook, max_depth=2, max_steps=200_000)
    try:
        ev.call_function(Function(module, method, owner), [], {}, self_value=engine)
    except OutOfBudget:
        return {}  # the sections keep the options as given
    out: dict[str, dict[str, Any]] = {}
    for outcome in ev.outcomes:
        if outcome.site.kind != "construct" or verdict([outcome]).value is False:
            continue
        values = {k: v for k, v in outcome.detail.items() if isinstance(v, _PLAIN)}
        name = outcome.site.message
        if name in out:  # several constructions: only what they agree on
            values = {k: v for k, v in values.items() if k in out[name] and out[name][k] == v}
        out[name] = values
    return out


def _post_init_fields(cls: ClassInfo | None) -> tuple[str, ...]:
    """Fields `__post_init__` assigns: vLLM computes them, so the user's JSON does not decide them."""
    if cls is None or "__post_init__" not in cls.methods:
        return ()
    # kept on the method: every config judged builds its sections again, and the pre-flight judges one after another
    return cached_on(cls.methods["__post_init__"], "post_init_fields", _self_fields_assigned)  # type: ignore[no-any-return]


def _self_fields_assigned(function: ast.AST) -> tuple[str, ...]:
    names: list[str] = []
    for sub in walked(function):
        if isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    names.append(target.attr)
    return tuple(names)


# -- finding statements -------------------------------------------------------------------------------------------


def innermost(module: ParsedModule, node: ast.AST, tree: SourceTree) -> tuple[Any, ClassInfo | None] | None:
    """The innermost function of `module` containing `node`, with the class it belongs to."""
    parents = tree.parents(module)
    owners = {id(func): owner for func, owner in tree.functions(module)}
    current: ast.AST | None = parents.get(id(node))
    while current is not None:
        if id(current) in owners:
            return current, owners[id(current)]
        current = parents.get(id(current))
    return None


def find_sites(
    tree: SourceTree, text: str, kind: str, files: Iterable[str] = ("**",), platform: str | None = None
) -> list[SiteRef]:
    """Raises/asserts (kind "raise") or warning calls (kind "warning") whose message contains `text`."""
    key = ("sites", text, kind, tuple(files), platform)
    if key not in tree.memo:
        tree.memo[key] = _find_sites(tree, text, kind, list(files), platform)
    return tree.memo[key]


def _find_sites(tree: SourceTree, text: str, kind: str, files: list[str], platform: str | None) -> list[SiteRef]:
    words = sorted(text.split(), key=len, reverse=True)
    if not words:
        return []
    out: list[SiteRef] = []
    patterns = list(files)
    for path in tree.files_containing(words[0]):
        rel = tree.relpath(path)
        if not any(fnmatch.fnmatch(rel, p) or p == "**" for p in patterns):
            continue
        if platform is not None and other_platform(rel, platform):
            continue  # another platform's own checks (ROCm, XPU, ...) do not apply to this one
        raw = tree.text(path)
        if not all(w in raw for w in words) or not _may_hold(raw, text):
            continue
        module = tree.module(tree.module_name(path))
        if module is None:
            continue
        for node, message in message_nodes(tree, module, kind):
            if text not in message:
                continue
            found = innermost(module, node, tree)
            if found is None:
                continue
            out.append(SiteRef(module, found[0], found[1], node, message, rel))
    return out


def _may_hold(raw: str, text: str) -> bool:
    """A cheap test before parsing: some three consecutive words of `text` appear as written. A message split
    over several literals (at most every few words) keeps one such run intact."""
    words = text.split()
    if len(words) <= 3:
        return text in raw
    return any(" ".join(words[i : i + 3]) in raw for i in range(len(words) - 2))


def message_nodes(tree: SourceTree, module: ParsedModule, kind: str) -> list[tuple[ast.AST, str]]:
    """Every raise/assert or warning call of a module with its text, indexed once per module."""
    key = ("messages", module.name, kind)
    if key not in tree.memo:
        tree.memo[key] = [(n, message_of(_message_expr(n))) for n in _message_nodes(module.tree, kind)]
    return tree.memo[key]


def _message_nodes(tree: ast.Module, kind: str) -> Iterable[ast.AST]:
    for node in ast.walk(tree):
        if kind == "raise":
            if (isinstance(node, ast.Raise) and node.exc is not None) or (
                isinstance(node, ast.Assert) and node.msg is not None
            ):
                yield node
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith("warn"):
            yield node


def other_platform(relpath: str, platform: str) -> bool:
    """`platforms/rocm.py` is another platform than "cuda"; the shared interface is not."""
    if not relpath.startswith("platforms/") or relpath.count("/") != 1:
        return False
    return relpath.rpartition("/")[2].removesuffix(".py") not in (platform, "interface", "__init__")


def _message_expr(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Raise):
        return node.exc  # type: ignore[return-value]
    if isinstance(node, ast.Assert):
        return node.msg  # type: ignore[return-value]
    return node


# -- reaching statements -------------------------------------------------------------------------------------------


@dataclass
class _Context:
    path: frozenset
    self_value: Any
    args: list[Any]
    kwargs: dict[str, Any]
    # What the callers' try/except make of the function's outcomes (None: no caller calls it inside a `try`).
    guard: Callable[[list[Outcome]], list[Outcome]] | None = None


@dataclass(frozen=True)
class _Caller:
    module: ParsedModule
    function: Any
    owner: ClassInfo | None
    calls: list[ast.AST]  # its calls of the function followed


@dataclass
class Reach:
    """Evaluates whether a situation reaches statements, following callers up to `depth` levels."""

    situation: Situation
    depth: int = 2
    problems: list[str] = field(default_factory=list)
    _entries: dict[int, list[_Context]] = field(default_factory=dict)

    @property
    def tree(self) -> SourceTree:
        return self.situation.tree

    def verdict(self, sites: list[SiteRef]) -> Verdict:
        return verdict(self.outcomes(sites))

    def outcomes(self, sites: list[SiteRef], watch_attrs: Iterable[str] = ()) -> list[Outcome]:
        by_function: dict[int, list[SiteRef]] = {}
        for site in sites:
            by_function.setdefault(id(site.function), []).append(site)
        out: list[Outcome] = []
        for group in by_function.values():
            first = group[0]
            targets = {id(s.node) for s in group}
            out += self.reached(first.module, first.function, first.owner, targets, watch_attrs)
        return out

    def reached(
        self,
        module: ParsedModule,
        function: Any,
        owner: ClassInfo | None,
        targets: set[int] | None = None,
        watch_attrs: Iterable[str] = (),
    ) -> list[Outcome]:
        """The outcomes `function` records for this situation (those at the statements `targets` names, by id, where
        given): as an entry point where it is one, else from its callers (with their conditions)."""
        out: list[Outcome] = []
        for ctx in self.entries(module, function, owner, self.depth):
            ev = config_evaluator(self.tree, watch_attrs=watch_attrs)
            try:
                ev.call_function(
                    Function(module, function, owner), ctx.args, ctx.kwargs, ctx.path, self_value=ctx.self_value
                )
            except OutOfBudget as exc:  # what it did not reach is unknown: the verdict cannot be "no"
                raise OutOfBudget(f"{self.tree.relpath(module.path)}:{function.name}: {exc}") from None
            found = [o for o in ev.outcomes if targets is None or id(o.site.node) in targets]
            out += ctx.guard(found) if ctx.guard is not None and found else found
        return out

    def run(
        self, module: ParsedModule, function: Any, owner: ClassInfo | None, self_value: Any, kwargs: dict[str, Any]
    ) -> list[Outcome]:
        """Evaluate one function with given arguments (no callers followed); every outcome it records."""
        ev = config_evaluator(self.tree)
        try:
            ev.call_function(Function(module, function, owner), [], kwargs, self_value=self_value)
        except OutOfBudget as exc:
            raise OutOfBudget(f"{self.tree.relpath(module.path)}:{function.name}: {exc}") from None
        return ev.outcomes

    def constructed(
        self,
        module: ParsedModule,
        function: Any,
        owner: ClassInfo | None = None,
        attribute: str | None = None,
        given: dict[str, Any] | None = None,
    ) -> list[Outcome]:
        """The classes of the tree `function` builds instances of for this situation, each an outcome with the
        conditions it is built under: those it returns (`return C(...)`, in it or in what it calls) or, with
        `attribute`, those it stores there instead (`self.drafter = C(...)`, or a local of that name). A registry
        such as `init_speculator` or a model runner's constructor, evaluated however its tests are written (a
        local, a predicate, `in`). The raises it reaches come with them (a registry refusing the method).
        `given`: keyword arguments passed besides those bound from the situation."""

        def kept(parent: ast.AST | None) -> bool:
            if attribute is None:
                return isinstance(parent, ast.Return)
            targets = parent.targets if isinstance(parent, ast.Assign) else [getattr(parent, "target", None)]
            return any(
                (isinstance(t, ast.Attribute) and t.attr == attribute)
                or (isinstance(t, ast.Name) and t.id == attribute)
                for t in targets
            )

        def hook(ev: Evaluator, func: Any, args: Any, kwargs: Any, node: ast.AST, frame: Any, state: State) -> Any:
            if isinstance(func, ClassRef) and kept(self.tree.parents(frame.module).get(id(node))):
                ev.record("construct", frame.module, node, func.info.name, state.path, func.info)
                return UNKNOWN
            return NOT_HANDLED

        ev = config_evaluator(self.tree, hook=hook)
        self._call(ev, module, function, owner, given)
        return [o for o in ev.outcomes if o.site.kind in ("construct", "raise", "assert")]

    def returned(self, module: ParsedModule, function: Any, owner: ClassInfo | None) -> list[Outcome]:
        """What `function` returns for this situation (a property of a config section: `self` is the section): an
        outcome per `return` reached, with the value as its detail and the conditions of its path."""
        ev = config_evaluator(self.tree, track_returns=True)
        self._call(ev, module, function, owner)
        return [o for o in ev.outcomes if o.site.kind == "return"]

    def _call(
        self,
        ev: Evaluator,
        module: ParsedModule,
        function: Any,
        owner: ClassInfo | None,
        given: dict[str, Any] | None = None,
    ) -> None:
        self_value, kwargs = self.situation.bind(function, owner, module)
        kwargs.update(given or {})
        try:
            ev.call_function(Function(module, function, owner), [], kwargs, self_value=self_value)
        except OutOfBudget as exc:
            raise OutOfBudget(f"{self.tree.relpath(module.path)}:{function.name}: {exc}") from None

    def entries(self, module: ParsedModule, function: Any, owner: ClassInfo | None, depth: int) -> list[_Context]:
        key = id(function)
        if key in self._entries:
            return self._entries[key]
        if owner is not None and any(k.name in self.situation.absent for k in self.tree.ancestors(owner)):
            return []  # a method of a config section this config does not have
        self._entries[key] = [self._bound(module, function, owner)]  # recursion guard
        contexts = self._from_callers(module, function, owner, depth) if depth > 0 and not _is_entry(function) else None
        result = contexts if contexts is not None else [self._bound(module, function, owner)]
        self._entries[key] = result
        return result

    def _bound(self, module: ParsedModule, function: Any, owner: ClassInfo | None) -> _Context:
        self_value, kwargs = self.situation.bind(function, owner, module)
        if function.name == "__post_init__" and isinstance(self_value, Obj):
            self_value = self.situation.fresh(self_value)
        return _Context(frozenset(), self_value, [], kwargs)

    def _from_callers(
        self, module: ParsedModule, function: Any, owner: ClassInfo | None, depth: int
    ) -> list[_Context] | None:
        callers = self._callers(function.name, function)
        if callers is None or not callers:
            return None
        contexts: list[_Context] = []
        for caller_module, caller, caller_owner, calls in callers:
            guarded = _in_try(self.tree, caller_module, caller, calls)
            for ctx in self.entries(caller_module, caller, caller_owner, depth - 1):
                ev = config_evaluator(self.tree, watch_calls=calls, max_depth=1, max_steps=100_000)
                try:
                    ev.call_function(
                        Function(caller_module, caller, caller_owner),
                        ctx.args,
                        ctx.kwargs,
                        ctx.path,
                        self_value=ctx.self_value,
                    )
                except OutOfBudget:
                    # The caller is too costly to follow: the function is judged as an entry point instead (a
                    # run whose whole budget is spent fails again at once, and the hazard goes unjudged).
                    self.problems.append(f"{self.tree.relpath(caller_module.path)}:{caller.name} was too costly")
                    return None
                calls_made = [o for o in ev.outcomes if o.site.kind == "call"]
                for index, outcome in enumerate(calls_made):
                    func_value, args, kwargs = outcome.detail
                    call = self._call_context(
                        outcome.path, func_value, args, kwargs, function, owner, outcome.site.node, module
                    )
                    if id(outcome.site.node) in guarded or ctx.guard is not None:
                        call.guard = functools.partial(
                            self._through_caller, _Caller(caller_module, caller, caller_owner, calls), ctx, index
                        )
                    contexts.append(call)
        return contexts

    def _through_caller(self, caller: _Caller, ctx: _Context, index: int, raised: list[Outcome]) -> list[Outcome]:
        """`raised` (the outcomes of the function that the caller's `index`-th call of it runs) as the caller's
        try/except leaves them: the caller is evaluated again with that call recording them, so its handlers catch
        them, run, and raise them again or not (see `Evaluator._handle`); then its own callers do the same."""
        watched = {id(c) for c in caller.calls}
        sites = {id(o.site) for o in raised}
        met = 0

        def hook(ev: Evaluator, func: Any, args: Any, kwargs: Any, node: ast.AST, frame: Any, state: State) -> Any:
            nonlocal met
            if id(node) not in watched:
                return NOT_HANDLED
            if met == index:
                ev.outcomes += [Outcome(o.site, o.path | state.path, o.detail) for o in raised]
            met += 1
            return UNKNOWN  # as the watched call of the first evaluation returned

        ev = config_evaluator(self.tree, hook=hook, max_depth=1, max_steps=100_000)
        try:
            ev.call_function(
                Function(caller.module, caller.function, caller.owner),
                ctx.args,
                ctx.kwargs,
                ctx.path,
                self_value=ctx.self_value,
            )
        except OutOfBudget as exc:
            raise OutOfBudget(f"{self.tree.relpath(caller.module.path)}:{caller.function.name}: {exc}") from None
        seen = [o for o in ev.outcomes if id(o.site) in sites]
        return ctx.guard(seen) if ctx.guard is not None and seen else seen

    def _call_context(
        self,
        path: frozenset,
        func_value: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        function: Any,
        owner: ClassInfo | None,
        call: ast.AST,
        module: ParsedModule,
    ) -> _Context:
        decorators = {(dotted(d) or "").rpartition(".")[2] for d in function.decorator_list}
        self_value: Any = None
        if owner is not None and "staticmethod" not in decorators:
            if isinstance(func_value, Bound):
                self_value = func_value.self_value
            elif "classmethod" in decorators:
                self_value = ClassRef(owner)
            else:
                self_value = self.situation.object_for(owner) or self.situation.stranger(owner)
        # What the call passes, by parameter name; what it passes unknown, the situation may know by annotation
        # or name (vLLM has one VllmConfig: a `vllm_config` parameter receives it whoever passes it).
        _, known_params = self.situation.bind(function, owner, module)
        params = [p.arg for p in [*function.args.posonlyargs, *function.args.args]]
        if self_value is not None and params:
            params = params[1:]
        named = dict(kwargs)
        for name, value in zip(params, args, strict=False):
            named[name] = value
        for name, value in known_params.items():
            if named.get(name, UNKNOWN) is UNKNOWN and value is not UNKNOWN:
                named[name] = value
        return _Context(path, self_value, [], named)

    def _callers(self, name: str, function: Any) -> list[tuple[ParsedModule, Any, Any, list[ast.AST]]] | None:
        key = ("callers", name, id(function))
        if key not in self.tree.memo:
            self.tree.memo[key] = self._find_callers(name, function)
        return self.tree.memo[key]

    def _find_callers(self, name: str, function: Any) -> list[tuple[ParsedModule, Any, Any, list[ast.AST]]] | None:
        files = self.tree.files_containing(f"{name}(")
        if len(files) > MAX_CALLER_FILES:
            return None  # too common a name to follow: treat the function as an entry point
        out: list[tuple[ParsedModule, Any, Any, list[ast.AST]]] = []
        for path in files:
            module = self.tree.module(self.tree.module_name(path))
            if module is None:
                continue
            for func, owner in self.tree.functions(module):
                if func is function:
                    continue
                calls = [
                    sub
                    for sub in own_nodes(func)
                    if isinstance(sub, ast.Call)
                    and (
                        (isinstance(sub.func, ast.Attribute) and sub.func.attr == name)
                        or (isinstance(sub.func, ast.Name) and sub.func.id == name)
                    )
                ]
                if calls:
                    out.append((module, func, owner, calls))
        return out


def _in_try(tree: SourceTree, module: ParsedModule, function: Any, calls: list[ast.AST]) -> set[int]:
    """The calls (ids) that lie inside a `try` statement of `function` itself."""
    parents = tree.parents(module)
    inside: set[int] = set()
    for call in calls:
        node = parents.get(id(call))
        while node is not None and node is not function:
            if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                inside.add(id(call))
                break
            node = parents.get(id(node))
    return inside


@dataclass
class _FieldReader:
    """A field of a config section as its validators receive it: the config's value, else the class default."""

    ev: Evaluator
    section: Obj
    module: ParsedModule

    def __call__(self, name: str) -> Any:
        read = ast.parse(f"section.{name}", mode="eval").body
        return self.ev.eval(read, Frame(self.module, None, None, 0), State({"section": self.section}, {}, frozenset()))


def _validated_field(function: Any) -> str | None:
    """The field a `@field_validator("name")` validates (the first, where it names several)."""
    for deco in function.decorator_list:
        if isinstance(deco, ast.Call) and (dotted(deco.func) or "").rpartition(".")[2] == "field_validator":
            first = deco.args[0] if deco.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                return first.value
    return None


def _is_entry(function: Any) -> bool:
    """Functions vLLM runs by construction or through pydantic: their callers are not followed."""
    if function.name.startswith("__") and function.name.endswith("__"):
        return True
    names = {
        (dotted(d.func if isinstance(d, ast.Call) else d) or "").rpartition(".")[2] for d in function.decorator_list
    }
    return bool(names & ENTRY_DECORATORS)
