"""SG104 duplicate-dcp-prep: a speculator subclass prepares DCP rank-local lengths itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst

from specguard.file_facts import FileFacts
from specguard.fix_model import NodeFix
from specguard.fixes.cst_edits import delete_statements, without_keyword
from specguard.fixes.import_edits import drop_import
from specguard.packs import Pack
from specguard.program.cst_tools import (
    Scope,
    dotted,
    is_self_call,
    is_true,
    keyword,
    kids,
    last_name,
    parameters,
    scopes,
)
from specguard.program.positions import spans
from specguard.program.sparse import sparse_lines
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext, report_judgements, speculator_module
from specguard.rules.preparations_reached import judge


def is_capture_builder_call(call: cst.Call, ctx: RuleContext) -> bool:
    arg = keyword(call, ctx.pack.metadata.capture_keyword or "")
    return arg is not None and is_true(arg.value)


def _names_a_preparation(facts: FileFacts, pack: Pack, mentions: frozenset[str]) -> bool:
    return facts.is_speculator_module and bool(mentions & set(pack.dcp.prepare))


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    if ctx.module is None:  # the evaluator's job: what a method reaches through other code
        for judgement in report_judgements("SG104", ctx):
            yield Diagnostic(None, judgement.message, judgement.scope, judgement.span)
        return
    prepare, sink = ctx.pack.dcp.prepare, ctx.pack.metadata.sink
    for scope in scopes(ctx.module):
        cls = scope.class_name
        if cls is None:
            if not ctx.facts.is_speculator_module:
                continue
        elif cls not in ctx.facts.speculator_classes or cls in ctx.facts.base_classes:
            continue
        calls = ctx.calls_in(scope.function)
        if cls is None and any(ctx.calls_function(c, sink) and is_capture_builder_call(c, ctx) for c in calls):
            continue  # a capture-time builder prepares its own dummy batch
        for call in calls:
            if ctx.calls_function(call, prepare):
                yield Diagnostic(
                    call,
                    f"`{scope.qualname}` calls `{ctx.callee(call)}` itself; the speculator base's shared helper "
                    f"already recomputes DCP rank-local lengths, so this duplicates (and can diverge from) it",
                    scope.qualname,
                    fix=_drop_duplicate(ctx, scope, call),
                )


# ---- the fix: delete the call when its result only feeds the helper's `dcp_local_seq_lens=` ---------------


def _statements(node: cst.CSTNode) -> Iterator[cst.SimpleStatementLine]:
    """Every one-statement line of a function, nested blocks included (not nested functions or classes)."""
    for child in kids(node):
        if isinstance(child, cst.SimpleStatementLine):
            if len(child.body) == 1:
                yield child
        elif not isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            yield from _statements(child)


def _assignment(line: cst.SimpleStatementLine) -> tuple[str, cst.BaseExpression] | None:
    """`name = value` with one plain name as its target."""
    stmt = line.body[0]
    if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name):
        return stmt.targets[0].target.value, stmt.value
    return None


def _holds_result(value: cst.BaseExpression, buffer: str, aliases: set[str], call: cst.Call) -> bool:
    """A value that is the prepared buffer, an alias of it, None, or a choice between those."""
    if isinstance(value, cst.IfExp):
        return all(_holds_result(v, buffer, aliases, call) for v in (value.body, value.orelse))
    name = dotted(value)
    return value is call or name in (buffer, "None") or name in aliases


def _drop_duplicate(ctx: RuleContext, scope: Scope, call: cst.Call) -> NodeFix | None:
    """Delete the call, the locals that only carry its buffer, and the `dcp_local_seq_lens=` they feed.

    Offered only when everything that reads the buffer (the call's first argument, or what it returns) is such a
    local or that argument of a shared helper's call: then the helper, which recomputes the lengths itself, is
    the only consumer of this copy of them.
    """
    param, helpers = ctx.pack.metadata.dcp_param, ctx.pack.speculators.shared_helpers
    buffer = dotted(call.args[0].value) if call.args and call.args[0].keyword is None else None
    lines = list(_statements(scope.function))
    home = next((ln for ln in lines if getattr(ln.body[0], "value", None) is call), None)
    if param is None or buffer is None or home is None:
        return None
    # Locals that only ever hold the buffer (or None), found to a fixed point: `lens = buffer`, `x = lens`.
    assigned: dict[str, list[cst.SimpleStatementLine]] = {}
    for line in lines:
        if (pair := _assignment(line)) is not None:
            assigned.setdefault(pair[0], []).append(line)
    aliases: set[str] = set()
    while True:
        more = {
            name
            for name, homes in assigned.items()
            if name not in aliases
            and all(_holds_result(_assignment(h)[1], buffer, aliases, call) for h in homes)  # type: ignore[index]
            and any(dotted(_assignment(h)[1]) != "None" for h in homes)  # type: ignore[index]
        }
        if not more:
            break
        aliases |= more
    if aliases & {p.name.value for p in parameters(scope.function)}:
        return None
    carriers = [h for name in aliases for h in assigned[name]]
    feeds = [c for c in ctx.calls_in(scope.function) if is_self_call(c) and last_name(c.func) in helpers]
    feeds = [c for c in feeds if any(a.keyword and a.keyword.value == param for a in c.args)]
    if not feeds:
        return None
    allowed = [home, *carriers, *(a.value for c in feeds for a in c.args if a.keyword and a.keyword.value == param)]
    if _reads_elsewhere(scope.function, buffer, aliases, {id(n) for n in allowed}):
        return None
    deletions = delete_statements(scope.function, list({id(n): n for n in [home, *carriers]}.values()))
    if deletions is None:
        return None
    deleted = "".join(ctx.module.code_for_node(node) for node, _ in deletions)
    unused_import = drop_import(ctx.source, call.func.value, deleted) if isinstance(call.func, cst.Name) else None
    return NodeFix(
        "unsafe",
        f"Delete the duplicate `{ctx.callee(call)}` call and the `{param}=` it feeds; the shared helper "
        f"recomputes them",
        (*deletions, *(without_keyword(c, param, _fits_in_place(ctx, c)) for c in feeds)),
        (unused_import,) if unused_import else (),
    )


def _fits_in_place(ctx: RuleContext, call: cst.Call) -> Callable[[str], bool]:
    """Whether a call's new code, put where `call` is, makes a line within the project's line length."""
    line, col, end_line, end_col = spans(ctx.module, [call])[0]
    lines = [row.rstrip("\r\n") for row in sparse_lines(ctx.text)]  # numbered as CPython numbers them
    prefix, suffix = lines[line - 1][: col - 1], lines[end_line - 1][end_col - 1 :]
    return lambda code: len(prefix + code + suffix) <= ctx.facts.line_length


def _reads_elsewhere(node: cst.CSTNode, buffer: str, aliases: set[str], allowed: set[int]) -> bool:
    """Whether the buffer or an alias of it is used anywhere outside the nodes whose ids are `allowed`."""
    if id(node) in allowed:
        return False
    if isinstance(node, cst.Attribute):  # `a.b.buf`, not the attribute name `buf` of something else
        return dotted(node) == buffer or _reads_elsewhere(node.value, buffer, aliases, allowed)
    if isinstance(node, cst.Name):
        return node.value == buffer or node.value in aliases
    if isinstance(node, cst.Arg):  # the value, not the keyword's name
        return _reads_elsewhere(node.value, buffer, aliases, allowed)
    return any(_reads_elsewhere(k, buffer, aliases, allowed) for k in kids(node))


RULE = Rule(
    code="SG104",
    name="duplicate-dcp-prep",
    title="speculator subclass prepares DCP rank-local lengths itself",
    summary=(
        "Flags a speculator subclass, or a module-level function of a speculator module that is not a "
        "capture-time builder, that calls the DCP local-length preparation (`prepare_dcp_local_seq_lens`) "
        "itself instead of leaving it to the shared helper, also where a speculator method runs it through other "
        "code (a partial or a method stored on the instance, a property, a generator, a function of another "
        "module). Preparing the lengths once and handing them to the helper is flagged too: the helper's own "
        "preparation is the one that stays in step with it (upstream removed DFlash's copy)."
    ),
    analysis=(
        "A call written in the function, by the name the preparation was imported under or through its module, "
        "is read from the source (and fixed, where safe). Every other way a speculator method reaches it is "
        "evaluated: the method runs with the instance as state, a callee is what the evaluation finds there "
        "(a partial stored on the instance by another method, a property, a generator it iterates, a function "
        "of another module of the tree), and a preparation that runs inside them is reported at the call written "
        "in the method that leads there. The shared helpers and the speculator base's own methods are where the "
        "preparation belongs: what they run is not counted.",
    ),
    why=(
        "Under decode context parallelism the shared helper recomputes rank-local sequence lengths from the "
        "draft's current global lengths. A subclass that repeats the preparation runs it twice per step and can "
        "disagree with the helper (different buffers, padding or interleave), as DFlash did before vLLM removed "
        "its copy."
    ),
    bad="""
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDFlashSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc, query_start_loc_np):
                dcp_local_seq_lens = None
                if self.block_tables.cp_size > 1:
                    prepare_dcp_local_seq_lens(
                        self.input_buffers.dcp_local_seq_lens, self.input_buffers.seq_lens, num_reqs,
                        self.block_tables.cp_size, self.block_tables.cp_rank, self.block_tables.cp_interleave,
                    )
                    dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
                return self._build_attn_metadata(
                    num_reqs, batch_desc, query_start_loc_np, dcp_local_seq_lens=dcp_local_seq_lens
                )
    """,
    good="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDFlashSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc, query_start_loc_np):
                # the shared helper recomputes DCP rank-local lengths itself
                return self._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
    check=check,
    applies=_names_a_preparation,
    judge=judge,
    judges=speculator_module,
    limits=(
        Limit(
            "A preparation reached through a name computed at run time (`getattr` with a name the evaluation cannot "
            "know) is not followed; nor one reached through a method the speculator inherits from a class of "
            "another module, unless the method's module is imported by name (a preselection by reading).",
            missed="""
                from vllm.v1.worker.gpu import cp_utils
                from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

                class MyDFlashSpeculator(DraftModelSpeculator):
                    def propose(self, num_reqs, kind):
                        prepare = getattr(cp_utils, f"{kind}_dcp_local_seq_lens")
                        prepare(self.dcp_lens, self.input_buffers.seq_lens, num_reqs)
            """,
        ),
    ),
    references=(
        'vllm-project/vllm#54277 ("Enable FlashInfer MLA for DSpark drafting", in vLLM 0.29.0): the shared draft '
        "metadata helper recomputes the rank-local lengths, and DFlash's own preparation "
        "is removed.",
    ),
    fix_availability="sometimes",
    fix_summary=(
        "Unsafe, and offered only when what the call prepares (its first argument, the buffer it fills, or what "
        "it returns) is read nowhere but in the shared helper's `dcp_local_seq_lens=` argument, directly or "
        "through locals that only carry it (or None). The fix deletes the call, those locals and the argument, "
        "an `if` it leaves empty and the import nothing else uses, so the helper recomputes the lengths once, "
        "itself; a call a formatter had split only for its length is joined back where it now fits. It is unsafe "
        "because "
        "the buffer may be read after the call returns (another method, a CUDA graph), and because the helper "
        "must be one that recomputes them (vLLM's does since the DCP fix)."
    ),
    fixed="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDFlashSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc, query_start_loc_np):
                return self._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
)
