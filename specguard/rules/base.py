"""What a rule is: its code, name and docs (printed by `specguard explain`), and one check function."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import libcst as cst

from specguard.analysis.cst_tools import dotted, is_self_call, last_name, walk_calls
from specguard.analysis.index import FileFacts
from specguard.packs import Pack


@dataclass(frozen=True)
class Diagnostic:
    node: cst.CSTNode
    message: str
    symbol: str | None = None


@dataclass
class RuleContext:
    module: cst.Module
    facts: FileFacts
    pack: Pack
    mentions: frozenset[str] = field(default_factory=frozenset)
    _calls: dict[int, list[cst.Call]] = field(default_factory=dict)

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

    def docs(self) -> str:
        """The text `specguard explain CODE` prints, in ruff's layout."""
        return "\n".join(
            [
                f"# {self.name} ({self.code})",
                "",
                "## What it does",
                textwrap.fill(self.summary, 100),
                "",
                "## Why is this bad?",
                textwrap.fill(self.why, 100),
                "",
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
