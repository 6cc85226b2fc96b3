"""What a rule is: its code, name and docs (printed by `specguard explain`), and one check function."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from specguard.analysis.cst_tools import dotted, is_self_call, last_name, walk_calls
from specguard.analysis.index import FileFacts
from specguard.analysis.source import parse_ast
from specguard.analysis.sparse import sparse_lines
from specguard.packs import Pack


@dataclass(frozen=True)
class Diagnostic:
    node: cst.CSTNode | None  # where it is: a libcst node, or None with `span`
    message: str
    symbol: str | None = None
    span: tuple[int, int, int, int] | None = None  # for rules on `ast`: the node's line, byte column, end line...


@dataclass
class RuleContext:
    module: cst.Module
    facts: FileFacts
    pack: Pack
    mentions: frozenset[str] = field(default_factory=frozenset)
    text: str = ""  # the source `module` was parsed from (only the definitions rules read; lines as in the file)
    _calls: dict[int, list[cst.Call]] = field(default_factory=dict)

    @cached_property
    def tree(self) -> ast.Module:
        """The same source as an `ast` tree, for the rules built on the dataflow layer."""
        return parse_ast(self.text, "<rules>")

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

    def calls_in(self, function: cst.FunctionDef) -> list[cst.Call]:
        """Every call in a function, in source order; several rules ask, so it is walked once."""
        if id(function) not in self._calls:
            self._calls[id(function)] = list(walk_calls(function))
        return self._calls[id(function)]

    def callee(self, call: cst.Call) -> str | None:
        """Last component of the function a call reaches, after imports and aliases are resolved.

        Method calls on `self`/`super()` are returned as the method name too; rules that mean the module-level
        sink check `is_self_call` themselves.
        """
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
    analysis: tuple[str, ...] = ()  # paragraphs on how the rule follows values, and its limits

    def docs(self) -> str:
        """The text `specguard explain CODE` prints, in ruff's layout."""

        def fill(text: str) -> str:  # no breaks at hyphens: "non-causal" stays whole, quotes stay findable
            return textwrap.fill(text, 100, break_on_hyphens=False)

        analysis = ["## How it follows values", *(p for par in self.analysis for p in (fill(par), ""))]
        return "\n".join(
            [
                f"# {self.name} ({self.code})",
                "",
                "## What it does",
                fill(self.summary),
                "",
                "## Why is this bad?",
                fill(self.why),
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
            ]
        )


def speculator_module(facts: FileFacts, pack: Pack, mentions: frozenset[str]) -> bool:
    return facts.is_speculator_module
