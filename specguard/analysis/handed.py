"""What the engine is handed instead of importing it: the rules of a run, behind the few questions it asks.

The engine knows no rule module and loads no pack: the command line composes a run (specguard/composition.py)
and passes the pack, as data, and a `RuleSet`. A rule pack for another framework is then a data file plus, at
most, new rule modules; nothing here changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import libcst as cst

    from specguard.evaluation.program import Program
    from specguard.file_facts import FileFacts
    from specguard.packs import Pack
    from specguard.program.tree import ParsedModule


class RuleSet(Protocol):
    """The rules a run may enable. Plain data as far as the engine can tell: it travels to worker processes,
    which load a rule by its code when a file needs it."""

    @property
    def codes(self) -> Sequence[str]:
        """Every rule code, in order."""

    @property
    def evaluated(self) -> frozenset[str]:
        """The codes of the rules that judge on the evaluator, in the main process, with the project in view."""

    @property
    def judged(self) -> frozenset[str]:
        """The codes whose judgements the main process computes: the evaluated rules, and rules on libcst that
        report what the evaluation decided besides what they read."""

    def load(self, code: str) -> Any:
        """The rule of a code (imported on first use)."""

    def context(
        self,
        module: cst.Module | None,
        facts: FileFacts,
        pack: Pack,
        mentions: frozenset[str],
        parsed: str,
        source: str,
    ) -> Any:
        """What a rule reads of one file: its tree (None for the rules on `ast`), facts, pack and texts."""

    def question(self, path: str, module: ParsedModule, facts: FileFacts, pack: Pack, program: Program) -> Any:
        """What a rule on the evaluator judges one file with."""
