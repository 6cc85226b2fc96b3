"""Evaluate a serving config against the hazard catalogue and the facts of the served vLLM source.

One function per code: it checks the config-only part of the condition first and asks the source only then, so a
clean config costs almost nothing. Wording lives in the catalogue; these functions supply the facts it formats.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specguard.deploy.catalogue import (
    Catalogue,
    DraftPathParams,
    EvidenceParams,
    GroupMergeParams,
    Hazard,
    InterleaveParams,
    NonCausalDcpParams,
    SourceEnumParams,
    SpeculatorParams,
)
from specguard.deploy.facts import SourceFacts, SourceFinding
from specguard.deploy.model import ServingConfig
from specguard.deploy.source import ClassInfo


@dataclass(frozen=True)
class ConfigFinding:
    code: str
    severity: str
    message: str
    key: str
    fix: str

    def as_dict(self) -> dict[str, str]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "key": self.key,
            "fix": self.fix,
        }


@dataclass
class Judgement:
    findings: list[ConfigFinding] = field(default_factory=list)
    # Codes that need a vLLM source and were not judged because none was given.
    not_judged: list[str] = field(default_factory=list)
    source: str | None = None
    # What could not be read: parts of the source `specguard check` failed on, hazards whose facts failed.
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Hit:
    key: str
    facts: dict[str, Any]


Evaluator = Callable[[ServingConfig, Any, SourceFacts | None], list[_Hit]]


def _where(findings: list[SourceFinding], limit: int = 3) -> str:
    shown = "; ".join(f.where() for f in findings[:limit])
    return shown + (f"; and {len(findings) - limit} more" if len(findings) > limit else "")


def _interleave(cfg: ServingConfig) -> tuple[int, str]:
    """The interleave size DCP will use and the key that sets it.

    vLLM copies the deprecated dcp-kv-cache-interleave-size over cp-kv-cache-interleave-size when it is > 1.
    """
    if cfg.dcp_kv_cache_interleave_size is not None and cfg.dcp_kv_cache_interleave_size > 1:
        return cfg.dcp_kv_cache_interleave_size, "dcp-kv-cache-interleave-size"
    return cfg.cp_kv_cache_interleave_size or 1, "cp-kv-cache-interleave-size"


def _cfg101(cfg: ServingConfig, p: DraftPathParams, facts: SourceFacts | None) -> list[_Hit]:
    if cfg.method is None or cfg.data_parallel_size <= 1 or facts is None:
        return []
    classes = _speculators(cfg.method, p, facts)
    family = [c for c in classes if facts.descends_from(c, p.draft_path_class)]
    if not family:
        return []
    hits = facts.findings_in_lineage(family, p.rules)
    if not hits:
        return []
    return [
        _Hit(
            "data-parallel-size",
            {
                "method": cfg.method,
                "dp": cfg.data_parallel_size,
                "speculators": ", ".join(c.name for c in family),
                "findings": _where(hits),
            },
        )
    ]


def _speculators(method: str, p: SpeculatorParams, facts: SourceFacts) -> list[ClassInfo]:
    registry = facts.method_speculators(p.registry_file, p.registry_function, p.predicate_file, p.predicate_class)
    return registry.get(method, [])


def _cfg114(cfg: ServingConfig, p: SpeculatorParams, facts: SourceFacts | None) -> list[_Hit]:
    if cfg.method is None or cfg.decode_context_parallel_size <= 1 or facts is None:
        return []
    classes = _speculators(cfg.method, p, facts)
    hits = facts.findings_in_lineage(classes, p.rules)
    if not hits:
        return []
    return [
        _Hit(
            "decode-context-parallel-size",
            {
                "method": cfg.method,
                "dcp": cfg.decode_context_parallel_size,
                "speculators": ", ".join(c.name for c in classes),
                "findings": _where(hits),
            },
        )
    ]


def _cfg102(cfg: ServingConfig, p: InterleaveParams, facts: SourceFacts | None) -> list[_Hit]:
    if cfg.decode_context_parallel_size <= 1 or cfg.attention_backend not in p.backends or facts is None:
        return []
    interleave, key = _interleave(cfg)
    backend = facts.backend(p.registry_file, cfg.attention_backend)
    if backend is None or backend.builder is None:
        return []
    required = facts.interleave_requirement(backend.builder, p.interleave_attribute_suffix)
    if required is None or required[0] == interleave:
        return []
    rel = backend.builder.path.relative_to(facts.tree.root).as_posix()
    return [
        _Hit(
            key,
            {
                "dcp": cfg.decode_context_parallel_size,
                "backend": cfg.attention_backend,
                "builder": backend.builder.name,
                "required": required[0],
                "where": f"{rel}:{required[1]}",
                "interleave": interleave,
                "interleave_key": key,
            },
        )
    ]


def _cfg103(cfg: ServingConfig, p: NonCausalDcpParams, facts: SourceFacts | None) -> list[_Hit]:
    if (
        cfg.method not in p.methods
        or cfg.decode_context_parallel_size <= 1
        or cfg.attention_backend not in p.backends
        or facts is None
    ):
        return []
    backend = facts.backend(p.registry_file, cfg.attention_backend)
    if backend is None or backend.builder is None:
        return []
    found = facts.class_attribute(backend.builder, p.attribute)
    if found is not None and found[0] is True:
        return []
    declared = "not declared on it or its bases" if found is None else f"{found[1].name} sets it to {found[0]}"
    return [
        _Hit(
            "decode-context-parallel-size",
            {
                "method": cfg.method,
                "dcp": cfg.decode_context_parallel_size,
                "backend": cfg.attention_backend,
                "builder": backend.builder.name,
                "attribute": p.attribute,
                "declared": declared,
            },
        )
    ]


def _cfg104(cfg: ServingConfig, p: GroupMergeParams, facts: SourceFacts | None) -> list[_Hit]:
    if cfg.method not in p.methods or facts is None:
        return []
    hits = facts.findings_of(p.rules)
    if not hits:
        return []
    return [_Hit("speculative-config.method", {"method": cfg.method, "findings": _where(hits)})]


def _confirmed(p: EvidenceParams, facts: SourceFacts | None) -> bool:
    """Without a source the config-only condition stands; with one, the source must still validate it."""
    return facts is None or facts.has_evidence(p.evidence.file, p.evidence.kind, p.evidence.text)


def _cfg105(cfg: ServingConfig, p: EvidenceParams, facts: SourceFacts | None) -> list[_Hit]:
    tp, dcp = cfg.tensor_parallel_size, cfg.decode_context_parallel_size
    if dcp <= 1 or cfg.prefill_context_parallel_size != 1 or tp % dcp == 0 or not _confirmed(p, facts):
        return []
    divisors = ", ".join(str(d) for d in range(1, tp + 1) if tp % d == 0)
    return [_Hit("decode-context-parallel-size", {"tp": tp, "dcp": dcp, "divisors": divisors})]


def _accepted(value: str, accepted: list[str]) -> str:
    """Close spellings first when the value looks like a typo; otherwise everything the source accepts."""
    close = difflib.get_close_matches(value, accepted, n=3, cutoff=0.75)
    return ", ".join(close) if close else ", ".join(accepted)


def _enum_hit(value: str | None, key: str, p: SourceEnumParams, facts: SourceFacts | None) -> list[_Hit]:
    if value is None or facts is None:
        return []
    accepted = facts.accepted_values(p.file, p.symbol)
    if not accepted or value in accepted:
        return []
    return [_Hit(key, {"value": value, "method": value, "accepted": _accepted(value, accepted)})]


def _cfg106(cfg: ServingConfig, p: SourceEnumParams, facts: SourceFacts | None) -> list[_Hit]:
    return _enum_hit(cfg.method, "speculative-config.method", p, facts)


def _cfg107(cfg: ServingConfig, p: EvidenceParams, facts: SourceFacts | None) -> list[_Hit]:
    spec = cfg.speculative_config
    draft_tp = spec.draft_tensor_parallel_size if spec else None
    if draft_tp is None or draft_tp in (1, cfg.tensor_parallel_size) or not _confirmed(p, facts):
        return []
    return [
        _Hit(
            "speculative-config.draft_tensor_parallel_size",
            {"draft_tp": draft_tp, "tp": cfg.tensor_parallel_size},
        )
    ]


def _cfg108(cfg: ServingConfig, p: EvidenceParams, facts: SourceFacts | None) -> list[_Hit]:
    spec = cfg.speculative_config
    if spec is None or spec.tensor_parallel_size is None or not _confirmed(p, facts):
        return []
    return [_Hit("speculative-config.tensor_parallel_size", {"value": spec.tensor_parallel_size})]


def _cfg109(cfg: ServingConfig, p: EvidenceParams, facts: SourceFacts | None) -> list[_Hit]:
    spec = cfg.speculative_config
    if spec is None or not spec.num_speculative_tokens_per_batch_size or cfg.data_parallel_size <= 1:
        return []
    if not _confirmed(p, facts):
        return []
    k = spec.num_speculative_tokens if spec.num_speculative_tokens is not None else "(the draft model's n_predict)"
    return [_Hit("speculative-config.num_speculative_tokens_per_batch_size", {"dp": cfg.data_parallel_size, "k": k})]


def _cfg110(cfg: ServingConfig, p: EvidenceParams, facts: SourceFacts | None) -> list[_Hit]:
    if cfg.decode_context_parallel_size <= 1 or cfg.block_size is None:
        return []
    interleave, key = _interleave(cfg)
    if interleave <= cfg.block_size and cfg.block_size % interleave == 0:
        return []
    if not _confirmed(p, facts):
        return []
    return [
        _Hit(
            "block-size",
            {
                "block_size": cfg.block_size,
                "dcp": cfg.decode_context_parallel_size,
                "interleave": interleave,
                "interleave_key": key,
            },
        )
    ]


def _cfg111(cfg: ServingConfig, p: SourceEnumParams, facts: SourceFacts | None) -> list[_Hit]:
    return _enum_hit(cfg.cudagraph_mode, "compilation-config.cudagraph_mode", p, facts)


def _cfg112(cfg: ServingConfig, p: SourceEnumParams, facts: SourceFacts | None) -> list[_Hit]:
    return _enum_hit(cfg.attention_backend, "attention-backend", p, facts)


def _cfg113(cfg: ServingConfig, p: EvidenceParams, facts: SourceFacts | None) -> list[_Hit]:
    if cfg.prefill_context_parallel_size <= 1 or cfg.data_parallel_size <= 1 or not _confirmed(p, facts):
        return []
    return [
        _Hit(
            "prefill-context-parallel-size",
            {"pcp": cfg.prefill_context_parallel_size, "dp": cfg.data_parallel_size},
        )
    ]


def _cfg115(cfg: ServingConfig, p: EvidenceParams, facts: SourceFacts | None) -> list[_Hit]:
    mode = cfg.cudagraph_mode
    if not cfg.enforce_eager or mode is None or mode == "NONE" or not _confirmed(p, facts):
        return []
    return [_Hit("enforce-eager", {"mode": mode})]


EVALUATORS: dict[str, Evaluator] = {
    "CFG101": _cfg101,
    "CFG102": _cfg102,
    "CFG103": _cfg103,
    "CFG104": _cfg104,
    "CFG105": _cfg105,
    "CFG106": _cfg106,
    "CFG107": _cfg107,
    "CFG108": _cfg108,
    "CFG109": _cfg109,
    "CFG110": _cfg110,
    "CFG111": _cfg111,
    "CFG112": _cfg112,
    "CFG113": _cfg113,
    "CFG114": _cfg114,
    "CFG115": _cfg115,
}


def _render(hazard: Hazard, hit: _Hit, source: str) -> ConfigFinding:
    values = {"source": source, **hit.facts}
    return ConfigFinding(
        code=hazard.code,
        severity=hazard.severity,
        message=" ".join(hazard.message.format_map(values).split()),
        key=hit.key,
        fix=" ".join(hazard.fix.format_map(values).split()),
    )


def evaluate(cfg: ServingConfig, catalogue: Catalogue, facts: SourceFacts | None) -> Judgement:
    judgement = Judgement(source=facts.label if facts else None)
    source = facts.label if facts else "vLLM"
    for code, hazard in sorted(catalogue.hazards.items()):
        if facts is None and hazard.needs_source:
            judgement.not_judged.append(code)
            continue
        try:
            hits = EVALUATORS[code](cfg, hazard.params, facts)
        except Exception as exc:  # noqa: BLE001 - a fork's unusual source must cost one hazard, not the run
            judgement.notes.append(f"{code} not judged: reading the source failed ({type(exc).__name__}: {exc})")
            continue
        for hit in hits:
            judgement.findings.append(_render(hazard, hit, source))
    if facts is not None and facts.analysis_problems:
        shown = "; ".join(facts.analysis_problems[:3])
        more = f" (and {len(facts.analysis_problems) - 3} more)" if len(facts.analysis_problems) > 3 else ""
        judgement.notes.append(f"`specguard check` could not analyze all of the source: {shown}{more}")
    return judgement
