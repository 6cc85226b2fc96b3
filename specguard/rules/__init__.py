"""The rules: one module each, named `sg<code>_<name>.py`, each defining `RULE`.

Codes are read from the module names so that listing or selecting rules does not import libcst; a rule's
module is imported only when a file needs it (which keeps a warm, fully cached run fast).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import libcst as cst

    from specguard.evaluation.program import Program
    from specguard.file_facts import FileFacts
    from specguard.packs import Pack
    from specguard.program.tree import ParsedModule
    from specguard.rules.base import Rule, RuleContext
    from specguard.rules.judging import Question

_MODULE = re.compile(r"^sg(\d{3})_\w+$")

# SG000 is the engine's own: a file that could not be read, decoded or parsed.
SOURCE_ERROR_TITLE = "file cannot be read, decoded or parsed"
SOURCE_ERROR_DOCS = """# source-error (SG000)

## What it does
Reports a file that specguard could not analyze: it cannot be read, is not valid UTF-8 (or the encoding its
coding cookie names), contains NUL bytes, does not parse, or nests expressions too deeply for the parser. A path
named on the command line that does not exist, a broken link and a FIFO or device are reported the same way, at
line 1 (as ruff's E902).

## Why is this bad?
A file specguard cannot read is a file it cannot vouch for. The other files of the run are still analyzed;
fix the file or exclude it (`exclude` in [tool.specguard]).

Syntax is checked only in files that mention a name from the rule packs: the prefilter never parses the others,
so leave general syntax checking to your linter."""


@cache
def _modules() -> dict[str, str]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if match := _MODULE.match(info.name):
            found[f"SG{match.group(1)}"] = f"{__name__}.{info.name}"
    return dict(sorted(found.items()))


ALL_CODES: list[str] = list(_modules())
# The rules on the evaluator (their Rule has a `judge`): they judge files in the main process, which never imports
# the others (tests/test_rule_examples.py keeps this list true).
EVALUATED = frozenset({"SG101", "SG103", "SG105", "SG106", "SG201", "SG202", "SG203"})
# Rules on libcst that the evaluator judges too (their Rule has a `judge` as well): libcst reports what is written
# in the function, with its fix; the evaluator what the function reaches through other code.
JUDGED_TOO = frozenset({"SG104"})


def rule_name(code: str) -> str:
    """A rule's name without importing it: its module's name says it (sg102_helper_override: helper-override)."""
    if code == "SG000":
        return "source-error"
    return _modules()[code].rpartition(".")[2].split("_", 1)[1].replace("_", "-")


def rule_names() -> dict[str, str]:
    """Every code, SG000 included, with its name."""
    return {code: rule_name(code) for code in ["SG000", *ALL_CODES]}


def load_rule(code: str) -> Rule:
    return importlib.import_module(_modules()[code]).RULE


def all_rules() -> dict[str, Rule]:
    return {code: load_rule(code) for code in ALL_CODES}


# The rules whose names come from a built-in pack other than the base (`Rule.framework`; a test holds the two
# equal): a rule runs only where its pack is read.
FRAMEWORK_RULES: dict[str, frozenset[str]] = {"sglang": frozenset({"SG106", "SG203"})}


@dataclass(frozen=True)
class RuleSet:
    """These rules as the engine is handed them (`analysis.handed.RuleSet`): plain data, so it reaches worker
    processes by name, and each process imports a rule module (and libcst, and the evaluator) only when a file
    needs it."""

    codes: tuple[str, ...] = tuple(ALL_CODES)
    evaluated: frozenset[str] = EVALUATED
    judged: frozenset[str] = EVALUATED | JUDGED_TOO

    @classmethod
    def for_packs(cls, packs: tuple[str, ...]) -> RuleSet:
        """The rules whose built-in pack is among `packs`."""
        left_out = set().union(*(codes for pack, codes in FRAMEWORK_RULES.items() if pack not in packs))
        return cls(codes=tuple(c for c in ALL_CODES if c not in left_out))

    def load(self, code: str) -> Rule:
        return load_rule(code)

    def context(
        self,
        module: cst.Module | None,
        facts: FileFacts,
        pack: Pack,
        mentions: frozenset[str],
        parsed: str,
        source: str,
    ) -> RuleContext:
        from specguard.rules.base import RuleContext

        return RuleContext(module, facts, pack, mentions, parsed, source=source)

    def question(self, path: str, module: ParsedModule, facts: FileFacts, pack: Pack, program: Program) -> Question:
        from specguard.rules.judging import Question  # the evaluator loads with it, when a file is first judged

        return Question(path, module, facts, pack, program)
