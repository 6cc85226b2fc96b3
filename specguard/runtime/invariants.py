"""Pure launch-invariant checks: shapes, dtypes and host-side integers in, a Violation (or None) out.

Nothing here imports torch or vllm, reads tensor values, or touches a device: callers pass `.shape` tuples,
dtype names and plain ints they already hold on the host. That keeps every check free of device
synchronisation and testable without vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specguard.runtime.errors import Violation

Shape = Sequence[int]

# What FlashInfer's MLA decode entry takes for its integer operands (flashinfer-python 0.7.2.post1 docs).
MLA_INT_DTYPES: dict[str, str] = {
    "block_tables": "int32",
    "seq_lens": "int32",
    "cum_seq_lens_q": "int32",
    "causal_seqlens_kv_global": "int32",
}

_PADDING_CAUSE = (
    "the attention metadata was built with a padded token count (DP-synchronised or CUDA-graph padding, "
    "e.g. batch_desc.num_tokens) while the query holds the real tokens of query_start_loc"
)


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
        cause=_PADDING_CAUSE,
        rules=("SG103", "SG101"),
        facts={
            "q_rows": q_rows,
            "qo_indptr_last": planned_rows,
            "difference": q_rows - planned_rows,
            "planned_requests": planned_reqs,
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
        f"{expected} (= {batch_size} requests x {q_len_per_req})"
        if exact
        else (f"a multiple of the {batch_size} planned requests")
    )
    return Violation(
        check="G1",
        site=site,
        subject=subject,
        summary=f"q.shape[0] ({q_rows}) does not match the decode plan: expected {wanted}",
        cause=_PADDING_CAUSE,
        rules=("SG103", "SG101"),
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
            f"for {num_decodes} decode requests"
        ),
        cause=_PADDING_CAUSE,
        rules=("SG103", "SG101"),
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
) -> Violation | None:
    """G2: the batch geometry `trtllm_batch_decode_with_kv_cache_mla` is launched with agrees with itself.

    Without `cum_seq_lens_q` the query is [batch, q_len, heads, dim] and every per-request operand has
    `batch` rows; with it the query is compact [total_q, heads, dim] and the request count is
    len(cum_seq_lens_q) - 1. `dtypes` maps integer operands to dtype names; a hot caller may pass only the
    ones it found to differ from int32.
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
                f"cum_seq_lens_q has {cum_seq_lens_q_shape[0]} entries for {n_req} requests (needs {n_req + 1})"
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
    cause = (
        "the non-causal multi-token path flattened block_tables/seq_lens to one row per query token but left "
        "the DCP global causal bound (dcp_tot_seq_lens) per request"
        if unexpanded
        else "per-request decode tensors were expanded, sliced or padded inconsistently before the launch"
    )
    return Violation(
        check="G2",
        site=site,
        subject=subject,
        summary="; ".join(problems),
        cause=cause,
        rules=("SG202",),
        facts=facts,
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
) -> Violation | None:
    """G3: non-causal multi-token metadata may only reach a layer that declares non-causal decode."""
    if causal or not multi_token or layer_non_causal:
        return None
    return Violation(
        check="G3",
        site=site,
        subject=subject,
        summary=(
            f"non-causal metadata ({num_decode_tokens} query tokens for {num_decodes} requests) reached a "
            "layer that does not declare non_causal_multi_token_decode"
        ),
        cause=(
            "a causal layer shares a KV-cache group with a non-causal draft layer, so the group's causality "
            "flag was merged with any() and applied to the whole group"
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
    """G3 at KV-cache group merge: every causality flag must have one value across the group's specs."""
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
            f"a KV-cache group of {len(next(iter(flag_values.values())))} layer specs disagrees on "
            + ", ".join(sorted(split))
        ),
        cause=(
            "causal target layers and non-causal draft layers were put in one KV-cache group; merging the "
            "flag with any() makes the whole group non-causal"
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
            f"query_start_loc[-1] ({real_tokens}) for {num_reqs} requests in {cg_mode} mode: "
            f"{padding} padding tokens{dp_note}"
        ),
        cause=(
            "the speculator passed the padded batch_desc.num_tokens (DP/graph padding) to the metadata "
            "builder outside FULL CUDA-graph mode; FlashInfer then rejects q.shape[0] vs qo_indptr[-1]"
        ),
        rules=("SG103", "SG101"),
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
