"""Stage two, per candidate file: parse with libcst and run the enabled rules over it."""

from __future__ import annotations

import libcst as cst

from specguard.analysis.findings import Finding, source_error
from specguard.analysis.index import FileFacts
from specguard.analysis.positions import spans
from specguard.analysis.source import decode
from specguard.analysis.sparse import sparse_source
from specguard.errors import SourceError
from specguard.fixes.from_cst import checked_fix
from specguard.packs import Pack
from specguard.rules import load_rule
from specguard.rules.base import Diagnostic, RuleContext


def _names_to_keep(facts: FileFacts, pack: Pack) -> tuple[str, ...]:
    """The pack's names and the local aliases they were imported under (`bam` for build_attn_metadata)."""
    names = {n.decode() for n in pack.needles}
    aliases = {local for local, target in facts.imports if target.rpartition(".")[2] in names}
    return tuple(sorted(names | aliases))


def evaluate_source(
    text: str,
    path: str,
    facts: FileFacts,
    pack: Pack,
    codes: frozenset[str],
    mentions: frozenset[str],
    definitions: list[tuple[int, int]],
) -> list[Finding]:
    rules = [r for r in map(load_rule, sorted(codes)) if r.applies(facts, pack, mentions)]
    if not rules:
        return []  # no rule can match here: the file is never parsed with libcst
    try:
        parsed = sparse_source(text, definitions, _names_to_keep(facts, pack))
        module = cst.parse_module(parsed)
        ctx = RuleContext(module, facts, pack, mentions, parsed, source=text)
        found: list[tuple[str, Diagnostic]] = [(rule.code, d) for rule in rules for d in rule.check(ctx)]
        nodes = [diag.node for _, diag in found if diag.node is not None]
        located = iter(spans(module, nodes) if nodes else [])
        places = [ctx.span(diag.span) if diag.span is not None else next(located) for _, diag in found]
        fixes = [checked_fix(module, diag.fix, text, parsed) if diag.fix else None for _, diag in found]
    except cst.ParserSyntaxError as exc:
        return [source_error(path, f"syntax error (libcst): {exc.message}", exc.raw_line)]
    except RecursionError:  # libcst's and the rules' tree walks are recursive; CPython's parser let it through
        return [source_error(path, "cannot analyze: expression nesting too deep")]
    return [
        Finding(path, line, col, code, diag.message, end_line, end_col, diag.symbol, fix)
        for (code, diag), (line, col, end_line, end_col), fix in zip(found, places, fixes, strict=True)
    ]


def evaluate_file(
    path: str,
    data: bytes,
    facts: FileFacts,
    pack: Pack,
    codes: frozenset[str],
    mentions: frozenset[str],
    definitions: list[tuple[int, int]],
) -> list[Finding]:
    """Stage two for a file, on the bytes stage one read (never read again: the file may have changed since)."""
    if not any(load_rule(c).applies(facts, pack, mentions) for c in codes):
        return []  # decided before decoding the file again
    try:
        text = decode(data)
    except SourceError as exc:
        return [source_error(path, str(exc))]
    return evaluate_source(text, path, facts, pack, codes, mentions, definitions)
