"""Per-module summary for the project index: imports, classes and their bases, module-level functions.

Built with CPython's `ast` (a C parser, ~10x faster than libcst) because the index needs only names; rules
that need the full tree run on libcst, and only on the files the index says can match.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

# at run time too: the cache decodes ModuleSummary by its type hints
from specguard.analysis.dataflow.values import FlowSpec, FunctionFlow


@dataclass(frozen=True)
class ClassSummary:
    bases: tuple[str, ...]  # dotted base expressions as written, resolved later through the imports
    methods: frozenset[str]
    line: int


@dataclass
class ModuleSummary:
    module: str
    is_package: bool
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    classes: dict[str, ClassSummary] = field(default_factory=dict)
    functions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> parameter names
    # (first line, last line) of each top-level class and function, decorators included: the only statements
    # rules look into, so the others need not be parsed with libcst (see analysis/sparse.py)
    definitions: list[tuple[int, int]] = field(default_factory=list)
    # dataflow summary of each function ("name") and method ("Class.name"), computed only for the modules whose
    # functions a rule follows values into (analysis/dataflow/summaries.py); None until then
    flows: dict[str, FunctionFlow | None] | None = None

    def resolve(self, dotted: str) -> str:
        """Qualified name of a dotted reference as seen from this module."""
        head, _, rest = dotted.partition(".")
        if head in self.imports:
            target = self.imports[head]
        elif head in self.classes or head in self.functions:
            target = f"{self.module}.{head}" if self.module else head
        else:
            return dotted
        return f"{target}.{rest}" if rest else target


def dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript):  # Generic[T] -> Generic
        return dotted_name(node.value)
    return None


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".") if module else []
    package = parts if is_package else parts[:-1]
    base = package[: len(package) - (level - 1)] if level > 1 else package
    return ".".join([*base, *([target] if target else [])])


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return tuple(names)


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements at module level, looking through `if`/`try` blocks (TYPE_CHECKING imports, fallbacks)."""
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, ast.If):
            out.extend(_top_level(stmt.body) + _top_level(stmt.orelse))
        elif isinstance(stmt, ast.Try):
            out.extend(_top_level(stmt.body))
            for handler in stmt.handlers:
                out.extend(_top_level(handler.body))
    return out


def summarize(tree: ast.Module, module: str, is_package: bool) -> ModuleSummary:
    summary = ModuleSummary(module=module, is_package=is_package)
    for stmt in tree.body:
        if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
            summary.definitions.append((first, stmt.end_lineno or stmt.lineno))
    for stmt in _top_level(tree.body):
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    summary.imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    summary.imports[head] = head
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(module, is_package, stmt.level, stmt.module)
            for alias in stmt.names:
                if alias.name != "*":
                    summary.imports[alias.asname or alias.name] = f"{source}.{alias.name}" if source else alias.name
        elif isinstance(stmt, ast.ClassDef):
            bases = tuple(b for b in (dotted_name(e) for e in stmt.bases) if b)
            methods = frozenset(s.name for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
            summary.classes[stmt.name] = ClassSummary(bases, methods, stmt.lineno)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            summary.functions[stmt.name] = _params(stmt)
    return summary


def function_flows(summary: ModuleSummary, tree: ast.Module, flow: FlowSpec) -> dict[str, FunctionFlow | None]:
    """Fills in `summary.flows` from the module's tree: what each function does with the values `flow` tracks."""
    from specguard.analysis.dataflow.summaries import module_flows

    summary.flows = module_flows(_top_level(tree.body), flow, summary.resolve, summary.imports)
    return summary.flows
