"""What the evaluator knows of objects: attributes (fields, properties, methods, class defaults), names of a
module, enums, comparisons and truth in three-valued logic, and the few builtins it evaluates itself."""

from __future__ import annotations

import ast
from typing import Any

from specguard.deploy.source import ClassInfo, ParsedModule, dotted
from specguard.evaluation import environment
from specguard.evaluation import objects as evaluation
from specguard.evaluation.budget import Budget, builtin_result_size, method_result_size, size, too_large
from specguard.evaluation.objects import (
    DICT_METHODS,
    FORMAT_FIELD_SPEC,
    LIST_METHODS,
    MISSING,
    SET_METHODS,
    STR_METHODS,
    field_default,
    is_classvar,
)
from specguard.evaluation.paths import Frame, State
from specguard.evaluation.values import (
    UNKNOWN,
    Bound,
    ClassRef,
    EnumMember,
    Function,
    LiteralType,
    ModuleRef,
    Obj,
    Opaque,
    PyMethod,
    SuperRef,
    Token,
    TokenAttr,
    known,
)

_BUILTINS = {
    "getattr",
    "hasattr",
    "isinstance",
    "len",
    "any",
    "all",
    "min",
    "max",
    "sorted",
    "list",
    "tuple",
    "set",
    "frozenset",
    "dict",
    "int",
    "str",
    "float",
    "bool",
    "abs",
    "sum",
    "repr",
    "type",
    "super",
}


class ObjectModel(evaluation.ObjectModel):
    """What the config pre-flight's evaluation does differently from the rules' (see `evaluation.objects`): plain
    values only, builtins and methods charged to its work budget, the serving environment's variables read;
    `Evaluator` adds statements, expressions and calls."""

    budget: Budget
    _module_reads: dict[tuple[str, str], list[str]]  # the serving environment's variables each value read
    env: environment.ServedEnvironment
    quiet: int

    def _py_method(self, method: PyMethod, args: list[Any], kwargs: dict[str, Any]) -> Any:
        target = method.target
        if not known(args, self.budget) or not known(kwargs, self.budget):
            if method.name in ("append", "extend", "update", "add", "insert") and isinstance(target, (list, dict)):
                return None  # mutating with an unknown value: the container stays, its new part is unknown
            return UNKNOWN
        if method.name == "format" and isinstance(target, str) and FORMAT_FIELD_SPEC.search(target):
            return UNKNOWN  # a width or an attribute path in a format field: nothing a hazard needs, and costly
        cost = method_result_size(target, method.name, args, kwargs)
        if too_large(cost):
            if method.name in ("append", "extend", "update", "add", "insert") and isinstance(target, (list, dict)):
                return None  # not grown: what it would have held is unknown to the evaluation
            return UNKNOWN
        self.budget.spend(cost + size(target))
        try:
            result = getattr(target, method.name)(*args, **kwargs)
        except Exception:  # noqa: BLE001 - e.g. list.remove of a missing value: no effect we can model
            return UNKNOWN
        if isinstance(result, (type({}.items()), type({}.keys()), type({}.values()))):
            return list(result)
        return result

    def _builtin(
        self, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        short = name.rpartition(".")[2]
        if name.startswith("builtins."):
            return self._python_builtin(short, args, kwargs, node, frame, state)
        if short == "get_args" and len(args) == 1:
            value = args[0]
            return value.values if isinstance(value, LiteralType) else UNKNOWN
        if short == "cast" and len(args) == 2:
            return args[1]
        if name in ("os.getenv", "os.environ.get") and args and isinstance(args[0], str) and not kwargs:
            value = self.env.get(args[0])  # the serving environment, not specguard's process
            return value if value is not None else (args[1] if len(args) > 1 else None)
        return UNKNOWN

    def _python_builtin(
        self, short: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        if short == "getattr" and len(args) in (2, 3) and isinstance(args[1], str):
            value = self.getattr(args[0], args[1], state, frame.depth, missing=MISSING)
            if value is MISSING:
                return args[2] if len(args) == 3 else UNKNOWN
            return value
        if short == "hasattr" and len(args) == 2 and isinstance(args[1], str):
            value = self.getattr(args[0], args[1], state, frame.depth, missing=MISSING)
            return UNKNOWN if value is UNKNOWN else value is not MISSING
        if short == "isinstance" and len(args) == 2:
            return self.isinstance_of(args[0], args[1])
        if short == "super":
            if frame.owner is not None and "self" in state.locals:
                return SuperRef(frame.owner, state.locals["self"])
            if frame.owner is not None and "cls" in state.locals:
                return SuperRef(frame.owner, state.locals["cls"])
            return UNKNOWN
        if short in ("any", "all") and len(args) == 1:
            items = args[0] if isinstance(args[0], (list, tuple, set)) else None
            if items is None:
                return UNKNOWN
            self.budget.spend(len(items))
            truths = [self.truth(v, frame, state) for v in items]
            if short == "any":
                return True if True in truths else (UNKNOWN if UNKNOWN in truths else False)
            return False if False in truths else (UNKNOWN if UNKNOWN in truths else True)
        if short == "type":
            return UNKNOWN
        if not known(args, self.budget) or not known(kwargs, self.budget):
            return UNKNOWN
        cost = builtin_result_size(short, args)
        if cost is None or too_large(cost):
            return UNKNOWN
        self.budget.spend(cost)
        fn = {
            "len": len,
            "min": min,
            "max": max,
            "sorted": sorted,
            "list": list,
            "tuple": tuple,
            "set": set,
            "frozenset": frozenset,
            "dict": dict,
            "int": int,
            "str": str,
            "float": float,
            "bool": bool,
            "abs": abs,
            "sum": sum,
            "repr": repr,
        }.get(short)
        if fn is None:
            return UNKNOWN
        if any(isinstance(a, (Obj, ClassRef, EnumMember, Function, Bound, Opaque)) for a in args):
            return UNKNOWN
        try:
            return fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - a builtin refusing its input: the value is not known
            return UNKNOWN

    def getattr(self, base: Any, attr: str, state: State, depth: int, missing: Any = UNKNOWN) -> Any:
        if base is UNKNOWN:
            return UNKNOWN
        if isinstance(base, Obj):
            key = (id(base), attr)
            if key in state.writes:
                return state.writes[key]
            if attr in base.fields:
                return base.fields[attr]
            if base.cls is None:
                return UNKNOWN
            return self._class_member(
                base.cls, attr, base, state, depth, instance=True, missing=missing, defaults=base.defaults
            )
        if isinstance(base, ClassRef):
            if self.tree.is_enum(base.info) and attr in self.tree.enum_members(base.info):
                return EnumMember(base.info, attr)
            return self._class_member(
                base.info, attr, base, state, depth, instance=False, missing=missing, defaults=True
            )
        if isinstance(base, EnumMember):
            if attr == "name":
                return base.name
            if attr == "value":
                return self.enum_value(base)
            return self._class_member(
                base.cls, attr, base, state, depth, instance=True, missing=missing, defaults=False
            )
        if isinstance(base, SuperRef):
            cls = (
                base.self_value.cls
                if isinstance(base.self_value, Obj)
                else (base.self_value.info if isinstance(base.self_value, ClassRef) else None)
            )
            if cls is None:
                return UNKNOWN
            chain = self.tree.ancestors(cls)
            after = [
                c
                for i, c in enumerate(chain)
                if i > next((j for j, k in enumerate(chain) if k == base.owner), len(chain))
            ]
            for klass in after:
                if attr in klass.methods:
                    return self._method_value(klass, klass.methods[attr], base.self_value, state, depth)
            return UNKNOWN
        if isinstance(base, ModuleRef):
            return self._resolved(base.name, attr)
        if isinstance(base, Token):
            return TokenAttr(base, attr)
        if isinstance(base, Opaque):
            return Opaque(f"{base.name}.{attr}")
        if isinstance(base, str) and attr in STR_METHODS:
            return PyMethod(base, attr)
        if isinstance(base, dict) and attr in DICT_METHODS:
            return PyMethod(base, attr)
        if isinstance(base, list) and attr in LIST_METHODS:
            return PyMethod(base, attr)
        if isinstance(base, set) and attr in SET_METHODS:
            return PyMethod(base, attr)
        return missing if missing is not UNKNOWN and base is None else UNKNOWN

    def _class_member(
        self,
        cls: ClassInfo,
        attr: str,
        owner_value: Any,
        state: State,
        depth: int,
        *,
        instance: bool,
        missing: Any,
        defaults: bool,
    ) -> Any:
        for klass in self.tree.ancestors(cls):
            if attr in klass.methods:
                return self._method_value(klass, klass.methods[attr], owner_value, state, depth)
            if attr in klass.attributes:
                module = self.tree.module(klass.module)
                if module is None or (not defaults and not is_classvar(klass.annotations.get(attr))):
                    return UNKNOWN
                value = field_default(klass.attributes[attr])
                if value is None:
                    return UNKNOWN
                return self.eval(value, Frame(module, klass, None, depth), State({}, {}, frozenset()))
            if attr in klass.annotations:
                return UNKNOWN  # a declared field without a class-level value
        return missing

    def _method_value(
        self, klass: ClassInfo, node: ast.FunctionDef | ast.AsyncFunctionDef, owner_value: Any, state: State, depth: int
    ) -> Any:
        module = self.tree.module(klass.module)
        if module is None:
            return UNKNOWN
        func = Function(module, node, klass)
        decorators = {dotted(d) or "" for d in node.decorator_list}
        names = {d.rpartition(".")[2] for d in decorators}
        if names & {"property", "cached_property"}:
            if isinstance(owner_value, ClassRef):
                return UNKNOWN
            return self._invoke(func, owner_value, [], {}, state, depth + 1)
        if "staticmethod" in names:
            return func
        if "classmethod" in names or "field_validator" in names or "model_validator" in names:
            owner = (
                owner_value
                if isinstance(owner_value, ClassRef)
                else (
                    ClassRef(owner_value.cls)
                    if isinstance(owner_value, (Obj, EnumMember)) and owner_value.cls
                    else ClassRef(klass)
                )
            )
            return Bound(func, owner)
        if isinstance(owner_value, ClassRef):
            return func  # an unbound method reached through the class
        return Bound(func, owner_value)

    def module_value(self, module: ParsedModule, name: str) -> Any:
        shadowed = name in module.assigns or name in module.functions or name in module.imports
        if name in _BUILTINS and not shadowed and name not in module.classes:
            return Opaque(f"builtins.{name}")
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        return self._resolved(module.name, name)

    def _resolved(self, module: str, name: str) -> Any:
        """A module-level name's value, computed once per evaluator; the serving environment's variables it read
        are read again at each use (a test of `envs.X` is decided by X however often it is made)."""
        key = (module, name)
        if key in self._module_values:
            self.env.log.extend(self._module_reads.get(key, ()))
            return self._module_values[key]
        if key in self._resolving:
            return UNKNOWN
        self._resolving.add(key)
        mark = len(self.env.log)
        self.quiet += 1
        try:
            value = self._resolve_uncached(module, name)
        finally:
            self.quiet -= 1
            self._resolving.discard(key)
        self._module_values[key] = value
        if len(self.env.log) > mark:
            self._module_reads[key] = self.env.log[mark:]
        return value

    def _resolve_uncached(self, module: str, name: str) -> Any:
        parsed = self.tree.module(module)
        if parsed is not None and name in parsed.typing_only and "__getattr__" in parsed.functions:
            # Declared for type checkers only; at run time the module's __getattr__ answers (vLLM's envs).
            hook = Function(parsed, parsed.functions["__getattr__"])
            return self._invoke(hook, None, [name], {}, State({}, {}, frozenset()), 0)
        found = self.tree.resolve(module, name)
        if isinstance(found, ClassInfo):
            return ClassRef(found)
        if isinstance(found, str):
            return ModuleRef(found) if found.startswith(self.tree.package) else Opaque(found)
        if isinstance(found, tuple):
            parsed, node = found
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return Function(parsed, node)
            if any(parsed.assigns.get(varying) is node for varying in parsed.varies):
                return UNKNOWN  # assigned again where a check at import time fails: which value is not known
            frame = Frame(parsed, None, None, 0)
            return self.eval(node, frame, State({}, {}, frozenset()))
        if parsed is not None and name in parsed.imports:
            src, orig = parsed.imports[name]
            if not src.startswith(self.tree.package):
                return Opaque(f"{src}.{orig}")
        if parsed is not None and name in parsed.module_imports:
            target = parsed.module_imports[name]
            return ModuleRef(target) if target.startswith(self.tree.package) else Opaque(target)
        if self.tree.file_of(f"{module}.{name}") is not None:
            return ModuleRef(f"{module}.{name}")
        return UNKNOWN

    def equal(self, a: Any, b: Any) -> Any:
        if not known(a) or not known(b):
            return UNKNOWN
        if isinstance(a, EnumMember) or isinstance(b, EnumMember):
            if isinstance(a, EnumMember) and isinstance(b, EnumMember):
                return a == b
            member, other = (a, b) if isinstance(a, EnumMember) else (b, a)
            if self.tree.base_names(member.cls) & {"str", "int", "StrEnum", "IntEnum"}:
                return self.equal(self.enum_value(member), other)
            return False
        if isinstance(a, Obj) or isinstance(b, Obj):
            if a is b:
                return True
            obj = a if isinstance(a, Obj) else b
            if obj.cls is not None and self.tree.method(obj.cls, "__eq__") is not None:
                return UNKNOWN
            return False
        if isinstance(a, (ClassRef, Function, Bound, Opaque, ModuleRef, LiteralType, SuperRef, PyMethod)):
            return a == b
        if isinstance(b, (ClassRef, Function, Bound, Opaque, ModuleRef, LiteralType, SuperRef, PyMethod)):
            return False
        try:
            return bool(a == b)
        except Exception:  # noqa: BLE001 - values whose comparison fails: not decided
            return UNKNOWN

    def charge(self, units: int) -> None:
        self.budget.spend(units)
