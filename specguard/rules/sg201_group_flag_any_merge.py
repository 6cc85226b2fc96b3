"""SG201 group-flag-any-merge: a KV-cache group's per-layer causality flag is merged by a reduction."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from specguard.analysis.ast_tools import FUNCTIONS, has_decorator, span
from specguard.analysis.dataflow.calls import Passed
from specguard.analysis.dataflow.project import ProjectHooks
from specguard.analysis.dataflow.values import ANY, Item, Value
from specguard.analysis.dataflow.walker import FlowWalker
from specguard.fixes.agreement import AGREEING, agreement_fix
from specguard.fixes.ast_edits import indent_unit
from specguard.fixes.layout import Layout
from specguard.rules.base import Diagnostic, Limit, NodeFix, NoFix, Rule, RuleContext

REDUCTION = "reduction"  # the label Pack.merge_flow gives a reduction's or a fold's result

# What each way of merging gives a group whose layers disagree, in words.
_UNION = "a union: a group whose layers disagree carries its most permissive layer's flag (True if any layer sets it)"
_MEET = "an intersection: a group whose layers disagree carries its least permissive layer's flag (True only if "
_MEET += "every layer sets it)"
_OTHER = "a combination: a group whose layers disagree carries a value that no single layer declared"
_MEANING = {"any": _UNION, "max": _UNION, "or": _UNION, "|": _UNION, "all": _MEET, "min": _MEET, "and": _MEET}
_MEANING["&"] = _MEET


def _merging(item: Item) -> str:
    if item.source in ("or", "and", "|", "&"):
        return f"an `{item.source}` fold over a loop"
    return f"`{item.source}()`"


class _FlagSinks(ProjectHooks):
    """Where a merged flag leaves the merge: a keyword argument (`cls(flag=...)`, `replace(spec, flag=...)`),
    a `**kwargs` dict holding it, or an attribute store (`merged.flag = ...`)."""

    def __init__(self, ctx: RuleContext, qualname: str, method: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        super().__init__(ctx.facts, ctx.pack.merge_flow, None, None)
        self.ctx, self.method = ctx, method
        self.qualname = qualname
        self.flags = ctx.pack.kv_groups.flags
        self.found: list[Diagnostic] = []

    def on_call(self, node: ast.Call, args: list[Passed]) -> None:
        for arg in args:
            if arg.keyword in self.flags:
                self._report(arg.keyword, arg.node, arg.value, None)
            elif arg.star == "**":
                for flag in self.flags:
                    self._report(flag, arg.node, arg.value, flag)

    def on_store(self, node: ast.Attribute, value: Value) -> None:
        if node.attr in self.flags:
            self._report(node.attr, node, value, None)

    def _report(self, flag: str, node: object, value: Value, key: str | None) -> None:
        merged = [i for i in value.values() if i.label == REDUCTION and i.key == key and i.origin in (flag, ANY)]
        if not merged:
            return
        item = min(merged, key=lambda i: len(i.steps))
        how = item.how()
        fix = _fix(self.ctx, self.method, flag, item)
        self.found.append(
            Diagnostic(
                None,
                f"`{self.qualname}` merges the per-layer flag `{flag}` with {_merging(item)}"
                + (f" ({how})" if how else "")
                + f", {_MEANING.get(item.source, _OTHER)}; every consumer of the merged flag must then recompute "
                f"it per layer, or the merge must require the specs to agree (e.g. a set of the values with "
                f"exactly one element). The runtime guard's G3 (`VLLM_SPECGUARD=1`) reports a deployment's groups "
                f"whose layers disagree" + (f"; no fix offered: {fix.reason}" if isinstance(fix, NoFix) else ""),
                self.qualname,
                span(node),  # type: ignore[arg-type]
                fix=fix if isinstance(fix, NodeFix) else None,
            )
        )


# ---- the fix: require agreement where the reduction was (specguard/fixes/agreement.py) ------------------


def _fix(ctx: RuleContext, method: ast.FunctionDef | ast.AsyncFunctionDef, flag: str, item: Item) -> NodeFix | NoFix:
    reduction = next((n for n in ast.walk(method) if isinstance(n, ast.Call) and span(n) == item.span), None)
    if item.source not in AGREEING or reduction is None:
        return NoFix(f"{_merging(item)} has no value that stands for agreeing layers; require agreement by hand")
    layout = Layout(ctx.facts.line_length, indent_unit(ctx.text, method))
    return agreement_fix(ctx.text, method, flag, reduction, layout)


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    groups = ctx.pack.kv_groups
    for cls in ctx.tree.body:
        if not isinstance(cls, ast.ClassDef) or cls.name not in ctx.facts.spec_classes:
            continue
        for func in cls.body:
            if not isinstance(func, FUNCTIONS) or func.name not in groups.merge_methods:
                continue
            if not has_decorator(func, "classmethod"):
                continue
            qualname = f"{cls.name}.{func.name}"
            hooks = _FlagSinks(ctx, qualname, func)
            FlowWalker(ctx.pack.merge_flow, hooks, qualname=qualname).run(func, {})
            yield from hooks.found


def _spec_class_with_flag(facts, pack, mentions) -> bool:  # type: ignore[no-untyped-def]
    return bool(facts.spec_classes) and any(flag in mentions for flag in pack.kv_groups.flags)


RULE = Rule(
    code="SG201",
    name="group-flag-any-merge",
    title="KV-cache group causality flag merged with any()/all() or another reduction",
    summary=(
        "Flags a `merge` classmethod of a KV-cache/attention spec class that hands a per-layer causality flag "
        "(`non_causal_multi_token_decode`, or another flag the pack lists) to the merged spec when its value "
        "comes, directly or through local variables, from a reduction over the specs (`any`, `all`, `max`, "
        "`min`, `functools.reduce`, `sum`, or an `or`/`and` fold in a loop) and the method did not first "
        "require the specs to agree."
    ),
    why=(
        "A KV-cache group shares one attention-metadata build, and the merge makes one spec stand for every "
        "layer of it. `any()` is a union: a group whose layers disagree carries its most permissive layer's "
        "flag (`all()`: its least permissive), a value that describes no single layer. That is sound only if "
        "every consumer of the merged flag recomputes it per layer, or if the group never mixes. vLLM's DCP fix "
        "took the second way and made the merge assert one value. vLLM 0.33.0 takes the first: it documents the "
        "merged flag as a group capability ('Runtime metadata still selects causal vs. non-causal mode') and its "
        "MLA metadata builder recomputes the flag from its own layers, because 'merge() unions this flag across "
        "the KV group' (0.28.0's builder read the merged flag instead). A consumer that reads the merged value "
        "as its layer's own lets a causal target layer attend without its causal mask, so the rule keeps "
        "reporting the union: require agreement, or check every consumer and suppress the finding "
        "(`# specguard: ignore[SG201]`) with the reason. In a deployment, the runtime guard's G3 "
        "(`VLLM_SPECGUARD=1`) reports the groups whose layers actually disagree."
    ),
    analysis=(
        "Sources: a call of one of the pack's reductions (`[kv_groups] reductions`), or an accumulation "
        "(`flag = flag or s.flag`, `flag |= s.flag`) inside a loop. The value is followed through local "
        "variables, containers and their `**` unpacking to a keyword argument named after a flag of any call "
        "in the merge, or a store into an attribute of that name.",
        "Agreement clears a flag's reductions on the paths after it: a collection of its values checked to have "
        "one element (`assert len(flags) == 1`, `if len(set(...)) != 1: raise`), or each spec compared with "
        "the first (`assert s.flag == first`, `if s.flag != specs[0].flag: raise` in a loop, "
        "`all(s.flag == first for s in specs)`).",
    ),
    limits=(
        Limit(
            "A flag handed to the constructor by position is not followed.",
            missed="""
                from dataclasses import dataclass

                @dataclass
                class MLAAttentionSpec:
                    non_causal_multi_token_decode: bool = False

                    @classmethod
                    def merge(cls, specs):
                        return cls(any(s.non_causal_multi_token_decode for s in specs))
            """,
        ),
        Limit(
            "A reduction made in another method that the merge calls is not followed.",
            missed="""
                from dataclasses import dataclass

                @dataclass
                class MLAAttentionSpec:
                    non_causal_multi_token_decode: bool = False

                    @classmethod
                    def _merged_flag(cls, specs):
                        return any(s.non_causal_multi_token_decode for s in specs)

                    @classmethod
                    def merge(cls, specs):
                        return cls(non_causal_multi_token_decode=cls._merged_flag(specs))
            """,
        ),
    ),
    bad="""
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                assert all(isinstance(s, MLAAttentionSpec) for s in specs), "one kind per group"
                return cls(
                    non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs),  # SG201
                )

        @dataclass(frozen=True)
        class DraftAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                flag = max(s.non_causal_multi_token_decode for s in specs)
                return cls(non_causal_multi_token_decode=flag)  # SG201: through `flag`
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

        @dataclass
        class DraftAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                first = specs[0].non_causal_multi_token_decode
                for spec in specs[1:]:
                    if spec.non_causal_multi_token_decode != first:
                        raise ValueError("layers of one KV cache group must agree on causality")
                return cls(non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))
    """,
    check=check,
    applies=_spec_class_with_flag,
    references=(
        'vllm-project/vllm#54277 ("Enable FlashInfer MLA for DSpark drafting", in vLLM 0.29.0): '
        "`MLAAttentionSpec.merge` (`vllm/v1/kv_cache_interface.py`) asserts that the layers of a KV-cache group agree "
        "on `non_causal_multi_token_decode`; vLLM 0.30.0 and later merge it with `any()` again.",
    ),
    fix_availability="sometimes",
    fix_summary=(
        "Safe: the values the reduction reduced are collected in a set just before the statement that held it, "
        "the merge fails unless the set holds at most one value, and the reduction runs over that set instead. It"
        " fails as the merge's own checks fail: an `assert` with a message where the method checks with asserts "
        "(vLLM's merges do, and so does vLLM's own fix in 0.29.0), `raise AssertionError` where it has none, so "
        "every caller that probes `merge` keeps working and puts disagreeing layers in separate groups (vLLM's "
        "`is_kv_cache_spec_uniform` and KV-cache grouping catch `AssertionError`). It is safe because where the "
        "layers agree, `any`, `all`, `max` and `min` of the distinct values give what they gave over every "
        "layer's value, an empty group included, so the merge returns what it returned; only a group whose layers"
        " disagree, the input the rule reports, now fails. A project that unions the flag on purpose and "
        "recomputes it per layer in every consumer should suppress the finding instead: the fix would split such "
        "groups. Offered for `any`, `all`, `max` and `min` of one iterable in a simple statement or an `if` test "
        "of the merge itself (not in a lambda or comprehension, whose names the check could not see, nor around a"
        " comment it would lose); other reductions keep their finding, and the message says why."
    ),
    fixed="""
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                assert all(isinstance(s, MLAAttentionSpec) for s in specs), "one kind per group"
                non_causal_multi_token_decode_values = {
                    s.non_causal_multi_token_decode for s in specs
                }
                assert len(non_causal_multi_token_decode_values) <= 1, (
                    f"{cls.__name__}: all layers of one KV cache group must agree on "
                    f"non_causal_multi_token_decode, got {non_causal_multi_token_decode_values}"
                )
                return cls(
                    non_causal_multi_token_decode=any(
                        non_causal_multi_token_decode_values
                    ),  # SG201
                )

        @dataclass(frozen=True)
        class DraftAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                non_causal_multi_token_decode_values = {
                    s.non_causal_multi_token_decode for s in specs
                }
                if len(non_causal_multi_token_decode_values) > 1:
                    raise AssertionError(
                        f"{cls.__name__}: all layers of one KV cache group must agree on "
                        "non_causal_multi_token_decode, got "
                        f"{non_causal_multi_token_decode_values}"
                    )
                flag = max(non_causal_multi_token_decode_values)
                return cls(non_causal_multi_token_decode=flag)  # SG201: through `flag`
    """,
)
