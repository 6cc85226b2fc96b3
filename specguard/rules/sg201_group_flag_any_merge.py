"""SG201 group-flag-any-merge: a KV-cache group's causality flag is merged with any()/all()."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from specguard.analysis.cst_tools import classes, has_decorator, kids, last_name
from specguard.rules.base import Diagnostic, Rule, RuleContext


def _any_all(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Call) and last_name(node.func) in ("any", "all"):
        return last_name(node.func)
    return None


def _flag_merges(node: cst.CSTNode, flags: list[str]) -> Iterator[tuple[str, str, cst.CSTNode]]:
    """(flag, any|all, node) for `flag=any(...)` arguments and `flag = any(...)` assignments."""
    if isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value in flags:
        if (fn := _any_all(node.value)) is not None:
            yield node.keyword.value, fn, node
    elif isinstance(node, cst.Assign) and (fn := _any_all(node.value)) is not None:
        for target in node.targets:
            name = last_name(target.target)
            if name in flags:
                yield name, fn, node
    for child in kids(node):
        yield from _flag_merges(child, flags)


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    groups = ctx.pack.kv_groups
    for cls in classes(ctx.module):
        if cls.name.value not in ctx.facts.spec_classes or not isinstance(cls.body, cst.IndentedBlock):
            continue
        for item in cls.body.body:
            if not (isinstance(item, cst.FunctionDef) and item.name.value in groups.merge_methods):
                continue
            if not has_decorator(item, "classmethod"):
                continue
            for flag, fn, node in _flag_merges(item, groups.flags):
                yield Diagnostic(
                    node,
                    f"`{cls.name.value}.{item.name.value}` merges the per-layer flag `{flag}` with `{fn}()`; "
                    f"a KV-cache group must not mix causal and non-causal layers: require every spec to agree "
                    f"(e.g. a set of the values with exactly one element)",
                    f"{cls.name.value}.{item.name.value}",
                )


def _spec_class_with_flag(facts, pack, mentions) -> bool:  # type: ignore[no-untyped-def]
    return bool(facts.spec_classes) and any(flag in mentions for flag in pack.kv_groups.flags)


RULE = Rule(
    code="SG201",
    name="group-flag-any-merge",
    title="KV-cache group causality flag merged with any()/all()",
    summary=(
        "Flags a `merge` classmethod of a KV-cache/attention spec class that combines a boolean per-layer "
        "causality flag (`non_causal_multi_token_decode`, or another flag the pack lists) with `any(...)` or "
        "`all(...)` over the specs instead of requiring all specs of the group to agree."
    ),
    why=(
        "A KV-cache group shares one attention-metadata build. With `any()`, one non-causal draft layer turns "
        "the whole group, causal target layers included, non-causal (and `all()` does the reverse): the target "
        "then attends without its causal mask. vLLM's DCP fix made the merge assert a single value; the rule "
        "keeps that from regressing."
    ),
    bad="""
        from dataclasses import dataclass

        @dataclass
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                return cls(
                    non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs),
                )
    """,
    good="""
        from dataclasses import dataclass

        @dataclass
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                flags = {s.non_causal_multi_token_decode for s in specs}
                assert len(flags) == 1, "layers of one KV cache group must agree on causality"
                return cls(non_causal_multi_token_decode=flags.pop())
    """,
    check=check,
    applies=_spec_class_with_flag,
)
