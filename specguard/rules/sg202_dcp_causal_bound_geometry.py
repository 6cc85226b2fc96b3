"""SG202 dcp-causal-bound-geometry: rows expanded per query token, the global causal bound left per request."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from specguard.program.cst_tools import dotted, keyword, kids, last_name, scopes
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext


class RowExpansion:
    """Assignments in one function, and whether a value is expanded to one row per query token."""

    def __init__(self, function: cst.FunctionDef, expanders: list[str]) -> None:
        self.expanders = expanders
        self.assigned: dict[str, list[cst.BaseExpression]] = {}
        self._collect(function.body)

    def _collect(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Assign):
            for target in node.targets:
                elements = target.target.elements if isinstance(target.target, cst.Tuple) else None
                if elements is None:
                    if isinstance(target.target, cst.Name):
                        self.assigned.setdefault(target.target.value, []).append(node.value)
                elif isinstance(node.value, cst.Tuple) and len(node.value.elements) == len(elements):
                    for el, val in zip(elements, node.value.elements, strict=True):
                        if isinstance(el.value, cst.Name):
                            self.assigned.setdefault(el.value.value, []).append(val.value)
        for child in kids(node):
            self._collect(child)

    def expanded_expr(self, node: cst.BaseExpression) -> bool:
        """`x.repeat_interleave(n)` or `x[row_map]` (an index by a tensor of rows, not a slice or constant)."""
        for inner in _walk(node):
            if isinstance(inner, cst.Call) and last_name(inner.func) in self.expanders:
                return True
            if isinstance(inner, cst.Subscript) and len(inner.slice) == 1:
                index = inner.slice[0].slice
                if isinstance(index, cst.Index) and dotted(index.value) is not None:
                    return True
        return False

    def expanded(self, node: cst.BaseExpression) -> bool:
        """Expanded itself, or a local name that some assignment expands (on some path)."""
        if self.expanded_expr(node):
            return True
        return isinstance(node, cst.Name) and any(self.expanded_expr(v) for v in self.assigned.get(node.value, []))


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in kids(node):
        yield from _walk(child)


def _string_key(node: cst.CSTNode) -> str | None:
    """The text of a literal string key, `"x"` in `d["x"]` or `{"x": ...}`."""
    if isinstance(node, cst.Index):
        node = node.value
    return node.evaluated_value if isinstance(node, cst.SimpleString) else None  # type: ignore[return-value]


def _bound_values(function: cst.FunctionDef, call: cst.Call, param: str) -> Iterator[cst.BaseExpression]:
    """Every value handed to the kernel as `param`: directly, or through a `**kwargs` dict built locally."""
    if (arg := keyword(call, param)) is not None:
        yield arg.value
    spread = {a.value.value for a in call.args if a.star == "**" and isinstance(a.value, cst.Name)}
    if not spread:
        return
    for node in _walk(function.body):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            owner = node.func.value
            updates = node.func.attr.value == "update" and isinstance(owner, cst.Name) and owner.value in spread
            if updates and (arg := keyword(node, param)) is not None:
                yield arg.value
        elif isinstance(node, cst.Assign) and len(node.targets) == 1:
            target = node.targets[0].target
            if isinstance(target, cst.Subscript) and dotted(target.value) in spread:
                if _string_key(target.slice[0].slice) == param:
                    yield node.value
            elif isinstance(target, cst.Name) and target.value in spread and isinstance(node.value, cst.Dict):
                for el in node.value.elements:
                    if isinstance(el, cst.DictElement) and _string_key(el.key) == param:
                        yield el.value


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    mla = ctx.pack.mla
    bound = mla.global_bound_param or ""
    for scope in scopes(ctx.module):
        entry_calls = [c for c in ctx.calls_in(scope.function) if ctx.calls_function(c, mla.decode_entry)]
        for call in entry_calls:
            values = list(_bound_values(scope.function, call, bound))
            if not values:
                continue
            flow = RowExpansion(scope.function, mla.row_expanders)
            rows = [a for a in (keyword(call, p) for p in mla.row_params) if a is not None]
            expanded_rows = [a.keyword.value for a in rows if a.keyword and flow.expanded(a.value)]
            if not expanded_rows:
                continue
            for value in values:
                if not flow.expanded(value):
                    yield Diagnostic(
                        value,
                        f"`{scope.qualname}` expands {' and '.join(f'`{r}`' for r in expanded_rows)} to one row "
                        f"per query token but hands `{bound}` to `{ctx.callee(call)}` per request; expand it "
                        f"the same way (e.g. `.repeat_interleave(query_len)` or index it by the row map)",
                        scope.qualname,
                    )


def _calls_entry_with_bound(facts, pack, mentions) -> bool:  # type: ignore[no-untyped-def]
    return (pack.mla.global_bound_param or "") in mentions and any(e in mentions for e in pack.mla.decode_entry)


RULE = Rule(
    code="SG202",
    name="dcp-causal-bound-geometry",
    title="global causal bound not expanded like block_tables/seq_lens",
    summary=(
        "In a function that passes `causal_seqlens_kv_global` to the FlashInfer MLA decode entry "
        "(`trtllm_batch_decode_with_kv_cache_mla`), as a keyword or through a kwargs dict, flags the global "
        "causal bound when `block_tables`/`seq_lens` are expanded per query row (`repeat_interleave`, or "
        "indexing by a row map) on some path but the bound handed to the kernel is not expanded the same way."
    ),
    why=(
        "FlashInfer's decode kernel has no causal flag, so vLLM flattens each non-causal query block into one "
        "decode row per token. Under DCP the native context-parallel kernel also takes the global causal bound "
        "per row; left per request, its batch geometry disagrees with the expanded block table and sequence "
        "lengths and the kernel reads the wrong rows."
    ),
    bad="""
        from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

        def forward_mqa(q, kv_cache, decode, query_len, dcp_world_size, dcp_rank):
            block_table = decode.block_table.repeat_interleave(query_len, dim=0)
            seq_lens = decode.seq_lens.repeat_interleave(query_len)
            extra_kwargs = {}
            extra_kwargs.update(
                enable_dcp=True, cp_world=dcp_world_size, cp_rank=dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            )
            return trtllm_batch_decode_with_kv_cache_mla(
                query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens, **extra_kwargs,
            )
    """,
    good="""
        from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

        def forward_mqa(q, kv_cache, decode, query_len, dcp_world_size, dcp_rank):
            block_table = decode.block_table.repeat_interleave(query_len, dim=0)
            seq_lens = decode.seq_lens.repeat_interleave(query_len)
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens.repeat_interleave(query_len)
            extra_kwargs = {}
            extra_kwargs.update(
                enable_dcp=True, cp_world=dcp_world_size, cp_rank=dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
            return trtllm_batch_decode_with_kv_cache_mla(
                query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens, **extra_kwargs,
            )
    """,
    check=check,
    applies=_calls_entry_with_bound,
    limits=(
        Limit(
            "Expansion is read inside the function that launches the kernel: rows expanded by a helper function "
            "are not seen, so the bound left per request beside them is not flagged.",
            missed="""
                from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

                def per_row(x, n):
                    return x.repeat_interleave(n)

                def forward_mqa(q, kv_cache, decode, query_len):
                    return trtllm_batch_decode_with_kv_cache_mla(
                        query=q, kv_cache=kv_cache,
                        block_tables=per_row(decode.block_table, query_len),
                        seq_lens=per_row(decode.seq_lens, query_len),
                        causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
                    )
            """,
        ),
    ),
    references=(
        'vllm-project/vllm#54277 ("Enable FlashInfer MLA for DSpark drafting", in vLLM 0.29.0): '
        "`FlashInferMLAImpl.forward_mqa` (`vllm/v1/attention/backends/mla/flashinfer_mla.py`) repeats the "
        "global causal bounds when non-causal DSpark blocks are flattened into decode rows.",
        'vllm-project/vllm#54012 ("Use FlashInfer native CP for MLA decode"): the native context-parallel '
        "MLA decode that takes `causal_seqlens_kv_global`.",
    ),
)
