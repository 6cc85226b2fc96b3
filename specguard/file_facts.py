"""What the rules of one file are told about the rest of the project: plain data the engine's project index
computes (analysis/index.py) and every rule reads, so it sits below both."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from specguard.findings import Judgement
from specguard.program.signatures import Signature


@dataclass(frozen=True)
class FileFacts:
    """What the rules of one file need to know about the rest of the project (and the cache key for it)."""

    module: str
    imports: tuple[tuple[str, str], ...]
    local_names: frozenset[str]
    speculator_classes: frozenset[str]
    base_classes: frozenset[str]  # the configured speculator bases defined in this file
    spec_classes: frozenset[str]  # KV-cache/attention spec classes defined in this file
    sink_accepts_dcp: bool
    object_imports: frozenset[str] = frozenset()  # imported names known not to be modules (see calls_function)
    # methods named as a shared helper that a speculator class of this file, not a base, defines ("Class.method")
    helper_overrides: frozenset[str] = frozenset()
    # of those, the parameters of the definition `super().<method>` reaches from the class, where the project has it
    overridden: tuple[tuple[str, Signature], ...] = ()
    # for each class of this file with no base, the project's classes that name it beside other bases: (class,
    # module, class)
    mixed_into: tuple[tuple[str, str, str], ...] = ()
    line_length: int = 88  # what the project formats this file at (ruff's line-length): fixes fit it
    # what the rules on the evaluator concluded about its sites (computed with the whole project in view)
    judgements: tuple[Judgement, ...] = ()

    @property
    def is_speculator_module(self) -> bool:
        return bool(self.speculator_classes)

    @cached_property
    def import_map(self) -> dict[str, str]:
        """`imports` as a lookup; rules ask for every call, so it is built once per file."""
        return dict(self.imports)

    def resolve(self, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        if head in self.import_map:
            target = self.import_map[head]
        elif head in self.local_names:
            target = f"{self.module}.{head}" if self.module else head
        else:
            return dotted
        return f"{target}.{rest}" if rest else target

    def overridden_signature(self, override: str) -> Signature | None:
        """The parameters of what an override ("Class.method") overrides, if the project has its definition."""
        return next((s for name, s in self.overridden if name == override), None)
