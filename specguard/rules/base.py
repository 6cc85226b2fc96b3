"""What a rule is: its code, name and docs (printed by `specguard explain`), and one check function.

Importing a rule imports no libcst: the main process loads the rules on the evaluator to judge files (their
`judge`), and a warm run loads none; libcst comes in where a rule walks a concrete syntax tree, in the workers.
"""

from __future__ import annotations

import ast
import bisect
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from specguard.file_facts import FileFacts
from specguard.findings import Judgement
from specguard.fix_model import NodeFix
from specguard.packs import Pack
from specguard.program.ast_tools import span, walked
from specguard.program.reading import parse_ast
from specguard.program.sparse import sparse_lines

if TYPE_CHECKING:
    import libcst as cst

    from specguard.rules.judging import Question


@dataclass(frozen=True)
class Diagnostic:
    node: cst.CSTNode | None  # where it is: a libcst node, or None with `span`
    message: str
    symbol: str | None = None
    span: tuple[int, int, int, int] | None = None  # for rules on `ast`: the node's line, byte column, end line...
    fix: NodeFix | None = None


@dataclass
class RuleContext:
    module: cst.Module | None  # None where only rules on the evaluator run: no libcst parse is needed
    facts: FileFacts
    pack: Pack
    mentions: frozenset[str] = field(default_factory=frozenset)
    text: str = ""  # the source `module` was parsed from (only the definitions rules read; lines as in the file)
    source: str = ""  # the whole file (`text` holds only the definitions rules read); fixes edit its imports
    _calls: dict[int, list[cst.Call]] = field(default_factory=dict)

    @cached_property
    def tree(self) -> ast.Module:
        """The same source as an `ast` tree, for the rules on the evaluator (their fixes are placed by its nodes)."""
        return parse_ast(self.text, "<rules>")

    @cached_property
    def holders(self) -> dict[int, cst.BaseStatement]:
        """Each node of `module` -> the top-level statement holding it (`cst_tools.top_statements`), built once for
        the file's rules and fixes."""
        from specguard.program.cst_tools import top_statements

        assert self.module is not None
        return top_statements(self.module)

    @cached_property
    def _lines(self) -> list[bytes]:
        return [line.encode() for line in sparse_lines(self.text)]

    def span(self, node_span: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        """An `ast` span (byte columns, 0-based) as a finding's span (character columns, 1-based)."""
        line, col, end_line, end_col = node_span

        def chars(row: int, byte: int) -> int:
            text = self._lines[row - 1] if 0 < row <= len(self._lines) else b""
            return len(text[:byte].decode("utf-8", "replace")) + 1

        return line, chars(line, col), end_line, chars(end_line, end_col)

    def function_at(self, judgement: Judgement) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The innermost function of the judgement's scope (by name) that holds its first line."""
        name, line = judgement.scope.rpartition(".")[2], judgement.span[0]
        starts, nodes, enclosing = self._functions.get(name, ([], [], []))
        at = bisect.bisect_right(starts, line) - 1  # the last one to start at or above the line
        while at >= 0 and line > (nodes[at].end_lineno or nodes[at].lineno):
            at = enclosing[at]  # one that ended above the line: only a function around it may still hold the line
        return nodes[at] if at >= 0 else None

    def node_at(self, where: tuple[int, int, int, int] | None) -> ast.AST | None:
        """The expression (or keyword argument) of `tree` at exactly this span, the outermost where several are."""
        return self._expressions.get(where) if where is not None else None

    @cached_property
    def _functions(self) -> dict[str, tuple[list[int], list[ast.FunctionDef | ast.AsyncFunctionDef], list[int]]]:
        """Every function of `tree` by name, in line order, with the index of the nearest one of that name around
        each (-1 for none): the tree is walked once, and a judgement looks at a few functions, not at every one of
        its name (a file of a thousand speculators made that quadratic)."""
        found: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        for node in walked(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(node.name, []).append(node)
        indexed = {}
        for name, nodes in found.items():
            nodes.sort(key=lambda node: node.lineno)
            enclosing, open_ = [], []
            for at, node in enumerate(nodes):
                while open_ and (nodes[open_[-1]].end_lineno or nodes[open_[-1]].lineno) < node.lineno:
                    open_.pop()
                enclosing.append(open_[-1] if open_ else -1)
                open_.append(at)
            indexed[name] = ([node.lineno for node in nodes], nodes, enclosing)
        return indexed

    @cached_property
    def _expressions(self) -> dict[tuple[int, int, int, int], ast.AST]:
        """The first expression or keyword argument of each span in `ast.walk` order, the tree walked once."""
        found: dict[tuple[int, int, int, int], ast.AST] = {}
        for node in walked(self.tree):
            if isinstance(node, (ast.expr, ast.keyword)):
                found.setdefault(span(node), node)
        return found

    def calls_in(self, function: cst.FunctionDef) -> list[cst.Call]:
        """Every call in a function, in source order; several rules ask, so it is walked once."""
        from specguard.program.cst_tools import walk_calls

        if id(function) not in self._calls:
            self._calls[id(function)] = list(walk_calls(function))
        return self._calls[id(function)]

    def callee(self, call: cst.Call) -> str | None:
        """Last component of the function a call reaches, after imports and aliases are resolved.

        Method calls on `self`/`super()` are returned as the method name too; rules that mean the module-level
        sink check `is_self_call` themselves.
        """
        from specguard.program.cst_tools import dotted, is_self_call, last_name

        if is_self_call(call):
            return last_name(call.func)
        name = dotted(call.func)
        if name is None:
            return None
        return self.facts.resolve(name).rpartition(".")[2]

    def calls_function(self, call: cst.Call, names: list[str]) -> bool:
        """A call of a module-level function named in `names`: by its (imported, aliased) name or through an
        imported module, never a method of some object (`self.builder.build_attn_metadata()`, or
        `builders.build_attn_metadata()` after `from fork.registry import builders` where it is an instance)."""
        from specguard.program.cst_tools import dotted, is_self_call

        name = dotted(call.func)
        if name is None or is_self_call(call):
            return False
        head = name.partition(".")[0]
        if "." in name and (head not in self.facts.import_map or head in self.facts.object_imports):
            return False
        return self.facts.resolve(name).rpartition(".")[2] in names

    def speculator_scope(self, class_name: str | None) -> bool:
        """Code that runs as part of a speculator: its methods, or functions of a module defining one."""
        if class_name is None:
            return self.facts.is_speculator_module
        return class_name in self.facts.speculator_classes


Check = Callable[[RuleContext], Iterator[Diagnostic]]
Applies = Callable[[FileFacts, Pack, frozenset[str]], bool]
Judge = Callable[["Question"], Iterator[Judgement]]
FixAvailability = Literal["always", "sometimes", "never"]


@dataclass(frozen=True)
class Limit:
    """Something a rule does not see, said plainly. `missed`, where given, is code the rule does not flag: it runs
    as a test, so the sentence goes when the rule learns to see it."""

    text: str
    missed: str = ""


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    title: str  # one line for `specguard rules`
    summary: str
    why: str
    bad: str
    good: str
    check: Check
    applies: Applies
    # A rule on the evaluator judges each file in the main process, with the whole project in view (see
    # rules/judging.py); its `check` then reports the decided judgements. Such a rule needs no libcst parse.
    judge: Judge | None = None
    # Where its judge runs, where that is wider than where `check` applies (a rule on libcst judged too)
    judges: Applies | None = None
    analysis: tuple[str, ...] = ()  # paragraphs on how the rule follows values
    limits: tuple[Limit, ...] = ()
    # Where the pattern comes from and where to read more, as ruff's "References": plain text (no links), so
    # every link specguard prints is to its own documentation.
    references: tuple[str, ...] = ()
    # The framework whose code the rule's names come from (the built-in pack that names them): vllm or sglang.
    framework: str = "vllm"
    # Fixes, as ruff declares them: whether the rule offers one, what it does and how safe it is (`fix_summary`),
    # and, as fixit does, what the bad example becomes under `--fix --unsafe-fixes` (run as a test).
    fix_availability: FixAvailability = "never"
    fix_summary: str = ""
    fixed: str = ""

    def docs(self) -> str:
        """The text `specguard explain CODE` prints, in ruff's layout."""
        analysis = ["## How it follows values", *(p for par in self.analysis for p in (_fill(par), ""))]
        return "\n".join(
            [
                f"# {self.name} ({self.code})",
                "",
                *([f"Fix is {self.fix_availability} available.", ""] if self.fix_availability != "never" else []),
                "## What it does",
                _fill(self.summary),
                "",
                "## Why is this bad?",
                _fill(self.why),
                "",
                *(analysis if self.analysis else []),
                "## Example",
                "```python",
                textwrap.dedent(self.bad).strip(),
                "```",
                "",
                "Use instead:",
                "```python",
                textwrap.dedent(self.good).strip(),
                "```",
                *self._fix_docs(),
                *self._limit_docs(),
                *(["", "## References", *(_fill(r, "- ") for r in self.references)] if self.references else []),
            ]
        )

    def _limit_docs(self) -> list[str]:
        lines = ["", "## Limits"] if self.limits else []
        for limit in self.limits:
            lines += [_fill(limit.text)]
            if limit.missed:
                lines += ["", "Not flagged:", "```python", textwrap.dedent(limit.missed).strip(), "```"]
            lines += [""]
        return lines[:-1]

    def _fix_docs(self) -> list[str]:
        if self.fix_availability == "never":
            return []
        return [
            "",
            "## Fix",
            _fill(self.fix_summary),
            "",
            "The example above, after `specguard check --fix --unsafe-fixes`:",
            "```python",
            textwrap.dedent(self.fixed).strip(),
            "```",
        ]


def _fill(text: str, bullet: str = "") -> str:  # no breaks at hyphens: "non-causal" stays whole, quotes stay findable
    return textwrap.fill(text, 100, initial_indent=bullet, subsequent_indent=" " * len(bullet), break_on_hyphens=False)


def speculator_module(facts: FileFacts, pack: Pack, mentions: frozenset[str]) -> bool:
    return facts.is_speculator_module


def report_judgements(code: str, ctx: RuleContext) -> Iterator[Judgement]:
    """The decided judgements of one rule in the file `ctx` holds."""
    return (j for j in ctx.facts.judgements if j.code == code and j.decided)
