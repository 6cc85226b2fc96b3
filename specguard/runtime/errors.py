"""The violation record and the exception the guard raises in `raise` mode.

Kept free of torch/vllm imports: `specguard.runtime` re-exports these at import time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# What a message says, without its numbers and asides: a parenthesised aside ("(this batch: NONE, ...)"), a
# list of numbers ("[4, 4, 1]") and every other number go, so two batches that break the same invariant the
# same way share one kind.
_ASIDES = re.compile(r"\s*\([^()]*\)")
_NUMBER_LISTS = re.compile(r"\[[\d,\s]*\]")
_NUMBERS = re.compile(r"\d+")
_PLURALS = re.compile(r"(# \w+?)s\b")  # "1 request" and "2 requests" are one kind

# Static rules (specguard's analyzer) that find, in source, the causes behind each runtime check.
RULE_NAMES: dict[str, str] = {
    "SG101": "metadata-outside-helper",
    "SG103": "padded-token-count",
    "SG105": "stale-dcp-lens",
    "SG106": "plan-before-padding",
    "SG201": "group-flag-any-merge",
    "SG202": "dcp-causal-bound-geometry",
}

CHECK_TITLES: dict[str, str] = {
    "G0": "attention metadata boundary",
    "G1": "tokens vs query layout",
    "G2": "MLA/DCP launch geometry",
    "G3": "group causal consistency",
    "G4": "draft token count",
    "G5": "draft lengths",
    "G6": "pre-planned metadata vs the batch",
}


def count(n: int, noun: str) -> str:
    """ "1 request", "4 requests": a message's numbers read as English."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass(frozen=True)
class Violation:
    """One broken launch invariant, with everything an operator needs to act on it."""

    check: str  # "G0".."G6"
    site: str  # the guarded entry point, e.g. "FlashInferMLAImpl.forward_mqa"
    subject: str  # the layer, wrapper, builder or speculator involved
    summary: str  # the disagreement, with its numbers
    cause: str | None  # the likely cause, only when the numbers point at one
    rules: tuple[str, ...]  # static rule ids that find the cause in source (none for a batch-only condition)
    facts: dict[str, object] = field(default_factory=dict)  # the numbers, machine-readable
    # True where the launch or build would read or write outside its buffers: stopped in warn mode too
    out_of_bounds: bool = False

    @property
    def kind(self) -> str:
        """What differs, without the numbers: warn mode logs each new kind at a site once."""
        return _PLURALS.sub(r"\1", _NUMBERS.sub("#", _NUMBER_LISTS.sub("[#]", _ASIDES.sub("", self.summary))))

    @property
    def message(self) -> str:
        facts = ", ".join(f"{k}={v}" for k, v in self.facts.items())
        cause = (
            f"Likely cause: {self.cause}."
            if self.cause
            else "Likely cause: not determined from these numbers (the static rule below finds the known ones)."
        )
        named = ", ".join(f"{r} {RULE_NAMES.get(r, '')}".strip() for r in self.rules)
        rules = named or "none (it depends on the batch, not on a pattern in the source)"
        return (
            f"[specguard {self.check} {CHECK_TITLES.get(self.check, '')}] {self.site} ({self.subject}): "
            f"{self.summary}. Numbers: {facts}. {cause} Static rule that finds it: {rules}."
        )


class SpecGuardViolation(Exception):
    """Raised before a kernel launch or metadata build whose inputs break an invariant.

    Deliberately not an AssertionError (nor a ValueError): vLLM catches those in places where they mean
    "these inputs are not compatible, choose another way" (KV-cache spec merging), so a guard exception of
    that type would change what vLLM decides instead of stopping a bad launch.
    """

    def __init__(self, violation: Violation, note: str = "") -> None:
        super().__init__(f"{violation.message} {note}" if note else violation.message)
        self.violation = violation
