"""Blind, labelled cases for a runtime checker of speculative-decoding
attention-metadata *lengths* (vLLM 0.33.0).

Every case is a sequence of CommonAttentionMetadata builds, in the order the
runner makes them (target build first, then the speculator's draft builds).
Healthy builds are re-derived by hand from vLLM 0.33.0 source:

* V1 target:      vllm/v1/worker/gpu_model_runner.py:_prepare_inputs /
                  _build_attention_metadata (+ CommonAttentionMetadata.unpadded)
* V1 draft:       vllm/v1/spec_decode/llm_base_proposer.py: prepare_inputs,
                  prepare_inputs_padded, set_inputs_first_pass (extend path for
                  the draft-model proposer), propose() draft loop and
                  _update_positions_dependent_metadata, with the fused kernel in
                  vllm/v1/spec_decode/utils.py
                  (eagle_step_slot_mapping_metadata_kernel) and
                  extend_all_queries_by_N / compute_new_slot_mapping.
* V2 target:      vllm/v1/worker/gpu/model_runner.py:prepare_inputs,
                  model_states/default.py, attn_utils.build_attn_metadata,
                  cp_utils.prepare_dcp_local_seq_lens.
* V2 draft:       vllm/v1/worker/gpu/spec_decode/speculator.py:_build_attn_metadata
                  and target_dependent_ar/speculator.py (prepare_decode_inputs,
                  update_draft_inputs, _multi_step_decode, _fused_multi_step_decode),
                  gemma4 (advance_draft_positions=False), standalone_ar.
* Slot mapping:   vllm/v1/worker/block_table.py (V1) and
                  vllm/v1/worker/gpu/block_table.py:_compute_slot_mappings_kernel
                  (V2, DCP-aware).

Faults are produced by perturbing the *values* of length fields of one build
(and, where vLLM keeps those values in a persistent buffer, the builds after
it) while row counts and every other field stay what vLLM builds.
"fault_step" is computed, not hand-written: it is the first build whose
metadata differs from the healthy build of the same scenario.

Import with the runtime interpreter; ``python cases.py`` runs self_check().
"""

from __future__ import annotations

import numpy as np
import torch

from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens

PAD_SLOT = -1

# Source idioms (file:function) used below.
SRC_V1_PADDED = (
    "vllm/v1/spec_decode/llm_base_proposer.py:prepare_inputs_padded+propose"
    "/_update_positions_dependent_metadata"
)
SRC_V1_NONPADDED = (
    "vllm/v1/spec_decode/llm_base_proposer.py:prepare_inputs+propose"
    "/_update_positions_dependent_metadata"
)
SRC_V1_NOSPEC = (
    "vllm/v1/spec_decode/llm_base_proposer.py:propose (target metadata reused, "
    "no spec_decode_metadata)"
)
SRC_V1_DRAFT_MODEL = (
    "vllm/v1/spec_decode/draft_model.py:DraftModelProposer -> "
    "llm_base_proposer.py:set_inputs_first_pass/extend_all_queries_by_N+propose"
)
SRC_V1_TARGET = "vllm/v1/worker/gpu_model_runner.py:_prepare_inputs/_build_attention_metadata"
SRC_V2_TDAR = (
    "vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py:"
    "_multi_step_decode -> speculator.py:_build_attn_metadata"
)
SRC_V2_FUSED = (
    "vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py:"
    "_fused_multi_step_decode -> speculator.py:_build_attn_metadata"
)
SRC_V2_GEMMA4 = (
    "vllm/v1/worker/gpu/spec_decode/gemma4/speculator.py (advance_draft_positions"
    "=False) -> target_dependent_ar/speculator.py:_multi_step_decode"
)
SRC_V2_STANDALONE = (
    "vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py:_prefill/"
    "_multi_step_decode -> speculator.py:_build_attn_metadata"
)
SRC_V2_DCP = (
    "vllm/v1/worker/gpu/spec_decode/speculator.py:_build_attn_metadata "
    "(prepare_dcp_local_seq_lens from input_buffers.seq_lens)"
)
SRC_V2_TARGET = (
    "vllm/v1/worker/gpu/model_runner.py:prepare_inputs/execute_model "
    "(prepare_dcp_local_seq_lens) -> model_states/default.py:prepare_attn"
)


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _i32(x) -> torch.Tensor:
    return torch.tensor(list(x), dtype=torch.int32)


def _i64(x) -> torch.Tensor:
    return torch.tensor(list(x), dtype=torch.int64)


def dcp_local(seq: list[int], dcp: dict | None) -> list[int]:
    """Rank-local share, via vLLM's own get_dcp_local_seq_lens."""
    assert dcp is not None
    out = get_dcp_local_seq_lens(
        _i32(seq), dcp["world"], dcp["rank"], dcp["interleave"]
    )
    return [int(v) for v in out.tolist()]


def slot_of(pos: int, row: list[int], bs: int, dcp: dict | None) -> int:
    """Slot for a token position: V1 block_table.py kernel (no DCP) and V2
    gpu/block_table.py:_compute_slot_mappings_kernel (DCP aware)."""
    if dcp is None or dcp["world"] == 1:
        return row[pos // bs] * bs + pos % bs
    w, r, il = dcp["world"], dcp["rank"], dcp["interleave"]
    vbs = bs * w
    vbi, off = divmod(pos, vbs)
    if (off // il) % w != r:
        return PAD_SLOT
    local = (off // (w * il)) * il + off % il
    return row[vbi] * bs + local


def slot_to_pos(slot: int, row: list[int], bs: int, dcp: dict | None):
    """Inverse of slot_of for a given block-table row (None if not in row)."""
    blk, off = divmod(slot, bs)
    cols = [c for c, b in enumerate(row) if b == blk and b != 0]
    if not cols:
        return None
    c = cols[0]
    if dcp is None or dcp["world"] == 1:
        return c * bs + off
    w, r, il = dcp["world"], dcp["rank"], dcp["interleave"]
    rounds, rem = divmod(off, il)
    return c * bs * w + rounds * w * il + r * il + rem


def _alloc_rows(need: list[int], width: int) -> list[list[int]]:
    """Distinct, non-null (block 0 is the null block) ids, interleaved across
    requests the way a shared pool hands them out."""
    n = len(need)
    rows = []
    for i in range(n):
        ids = [3 + k * n + i for k in range(need[i])]
        assert len(ids) <= width
        rows.append(ids + [0] * (width - len(ids)))
    return rows


def _mk(
    qsl,
    seq,
    num_actual_tokens,
    max_query_len,
    max_seq_len,
    bt,
    slots,
    *,
    upper=None,
    dcp_lens=None,
    positions=None,
    is_prefilling=None,
    req_idx=None,
    causal=True,
) -> CommonAttentionMetadata:
    q = _i32(qsl)
    return CommonAttentionMetadata(
        query_start_loc=q,
        query_start_loc_cpu=q.clone(),
        seq_lens=_i32(seq),
        num_reqs=len(seq),
        num_actual_tokens=int(num_actual_tokens),
        max_query_len=int(max_query_len),
        max_seq_len=int(max_seq_len),
        block_table_tensor=torch.tensor(bt, dtype=torch.int32).reshape(
            len(seq), -1
        ),
        slot_mapping=_i64(slots),
        causal=causal,
        dcp_local_seq_lens=None if dcp_lens is None else _i32(dcp_lens),
        seq_lens_cpu_upper_bound=None if upper is None else _i32(upper),
        positions=None if positions is None else _i64(positions),
        is_prefilling=None
        if is_prefilling is None
        else torch.tensor(list(is_prefilling), dtype=torch.bool),
        req_idx=req_idx,
    )


def _noop(step_idx, st):
    return None


# ---------------------------------------------------------------------------
# Request description
#   nc: num_computed_tokens (GPU, exact); q: num_scheduled_tokens;
#   nd: scheduled draft tokens (0 for prefill chunks / first decode);
#   rej: drafts rejected by the verifier this step (<= nd);
#   prompt: prompt length (for is_prefilling); opt: extra optimistic tokens in
#   the CPU mirror of num_computed (async spec decode, V2 only).
# ---------------------------------------------------------------------------


def R(nc, q, nd=0, rej=0, prompt=None, opt=0):
    assert 0 <= rej <= nd
    if nd:
        assert q == nd + 1
    return dict(nc=nc, q=q, nd=nd, rej=rej, prompt=prompt if prompt else 1, opt=opt)


# ---------------------------------------------------------------------------
# V1 (gpu_model_runner.py + llm_base_proposer.py)
# ---------------------------------------------------------------------------


def v1_chain(
    reqs,
    K,
    bs,
    mml,
    *,
    mode="padded",
    target_pad_reqs=None,
    target_pad_tokens=None,
    hook=_noop,
):
    """mode: 'padded' (default, prepare_inputs_padded), 'nonpadded'
    (disable_padded_drafter_batch, prepare_inputs), 'nospec' (no drafts were
    scheduled: spec_decode_metadata is None, target metadata reused),
    'draft_model' (DraftModelProposer: extend_all_queries_by_N, padded)."""
    n = len(reqs)
    T = [r["nc"] + r["q"] for r in reqs]
    rej = [r["rej"] for r in reqs]
    q = [r["q"] for r in reqs]
    any_spec = any(r["nd"] > 0 for r in reqs)
    if mode == "nospec":
        assert not any_spec
    width = _cdiv(mml, bs)
    need = [_cdiv(min(t + K + 2, mml), bs) for t in T]
    rows = _alloc_rows(need, width)
    steps = []

    # ---- target build (V1 _build_attention_metadata) ----
    n_pad = target_pad_reqs or n
    qsl = [0]
    for x in q:
        qsl.append(qsl[-1] + x)
    tok = qsl[-1]
    tok_pad = target_pad_tokens or tok
    positions, slots = [], []
    for i, r in enumerate(reqs):
        for j in range(r["q"]):
            p = r["nc"] + j
            positions.append(p)
            slots.append(slot_of(p, rows[i], bs, None))
    positions += [0] * (tok_pad - tok)
    slots += [PAD_SLOT] * (tok_pad - tok)
    st = dict(
        seq=T + [0] * (n_pad - n),
        upper=T + [0] * (n_pad - n),  # optimistic == actual without async
        max_seq_len=max(T),
        T=list(T),
        rej=list(rej),
        step=0,
    )
    hook(0, st)
    tgt = _mk(
        qsl + [tok] * (n_pad - n),
        st["seq"],
        tok_pad,
        max(q),
        st["max_seq_len"],
        rows + [[0] * width] * (n_pad - n),
        slots,
        upper=st["upper"],
        positions=positions,
        is_prefilling=[r["nc"] < r["prompt"] for r in reqs] + [False] * (n_pad - n),
    )
    steps.append(dict(role="target", draft_index=None, metadata=tgt))
    t_seq = st["seq"][:n]
    t_upper = st["upper"][:n]
    t_max = st["max_seq_len"]

    # ---- draft build 0 (first pass) ----
    rewind = None
    if mode in ("padded", "draft_model") and any_spec:
        # prepare_inputs_padded: target's (unpadded) tensors, new CAM.
        d0 = dict(
            qsl=qsl,
            seq=list(t_seq),
            upper=list(t_upper),
            max_seq_len=t_max,
            ntok=tok,
            mql=max(q),
            slots=slots[:tok],
            positions=None,
            is_prefilling=None,
        )
        rewind = rej
        last_pos = [reqs[i]["nc"] + q[i] - rej[i] - 1 for i in range(n)]
    elif mode == "nonpadded" and any_spec:
        newq = [q[i] - rej[i] for i in range(n)]
        nqsl = [0]
        for x in newq:
            nqsl.append(nqsl[-1] + x)
        nslots = []
        for i in range(n):
            nslots += slots[qsl[i] : qsl[i] + newq[i]]
        new_seq = [t_upper[i] - rej[i] for i in range(n)]
        d0 = dict(
            qsl=nqsl,
            seq=new_seq,
            upper=list(new_seq),
            max_seq_len=max(new_seq),
            ntok=nqsl[-1],
            mql=max(q),  # new_query_len_per_req is the pre-rejection length
            slots=nslots,
            positions=None,
            is_prefilling=None,
        )
        last_pos = [reqs[i]["nc"] + q[i] - rej[i] - 1 for i in range(n)]
    else:
        # Target metadata (unpadded) handed to the drafter as-is.
        d0 = dict(
            qsl=qsl,
            seq=list(t_seq),
            upper=list(t_upper),
            max_seq_len=t_max,
            ntok=tok,
            mql=max(q),
            slots=slots[:tok],
            positions=positions[:tok],
            is_prefilling=[r["nc"] < r["prompt"] for r in reqs],
        )
        last_pos = [reqs[i]["nc"] + q[i] - 1 for i in range(n)]

    if mode == "draft_model":
        # set_inputs_first_pass with needs_extra_input_slots (N = 1):
        # copy_and_expand_eagle_inputs_kernel (shift_input_ids=False) +
        # compute_new_slot_mapping + extend_all_queries_by_N.
        ext_slots = []
        for i in range(n):
            start = reqs[i]["nc"]
            valid = q[i] - rej[i]
            for j in range(q[i] + 1):
                if j <= valid:
                    p = start + j
                    ext_slots.append(
                        PAD_SLOT if p >= mml else slot_of(min(p, mml - 1), rows[i], bs, None)
                    )
                else:
                    ext_slots.append(PAD_SLOT)  # rejected region
        d0 = dict(
            qsl=[d0["qsl"][i] + i for i in range(n + 1)],
            seq=[s + 1 for s in d0["seq"]],
            upper=d0["upper"],  # extend_all_queries_by_N leaves it untouched
            max_seq_len=d0["max_seq_len"] + 1,
            ntok=d0["ntok"] + n,
            mql=d0["mql"] + 1,
            slots=ext_slots,
            positions=d0["positions"],
            is_prefilling=d0["is_prefilling"],
        )
        # token_indices_to_sample -> the bonus token at start + valid
        last_pos = [reqs[i]["nc"] + q[i] - rej[i] for i in range(n)]

    st = dict(
        seq=d0["seq"],
        upper=d0["upper"],
        max_seq_len=d0["max_seq_len"],
        T=list(T),
        rej=list(rej),
        step=0,
        prev_seq=list(t_seq),
    )
    hook(1, st)
    m0 = _mk(
        d0["qsl"],
        st["seq"],
        d0["ntok"],
        d0["mql"],
        st["max_seq_len"],
        rows,
        d0["slots"],
        upper=st["upper"],
        positions=d0["positions"],
        is_prefilling=d0["is_prefilling"],
    )
    steps.append(dict(role="draft", draft_index=0, metadata=m0))

    # ---- draft loop (propose) ----
    if K > 1:
        seq = list(st["seq"])
        upper = list(st["upper"])
        max_seq_len = st["max_seq_len"]
        if rewind is not None:
            seq = [seq[i] - rewind[i] for i in range(n)]
        pos = list(last_pos)
        for t in range(K - 1):
            prev_seq = list(seq)
            sl = []
            for i in range(n):
                newp = pos[i] + 1
                exceeds = newp >= mml
                pos[i] = 0 if exceeds else newp
                sl.append(PAD_SLOT if exceeds else slot_of(pos[i], rows[i], bs, None))
                seq[i] = min(1 if exceeds else seq[i] + 1, mml)
            max_seq_len = min(max_seq_len + 1, mml)
            upper = [u + 1 for u in upper]
            st = dict(
                seq=seq,
                upper=upper,
                max_seq_len=max_seq_len,
                T=list(T),
                rej=list(rej),
                step=t + 1,
                prev_seq=prev_seq,
                d0_seq=list(d0["seq"]),
            )
            hook(len(steps), st)
            seq, upper, max_seq_len = list(st["seq"]), list(st["upper"]), st["max_seq_len"]
            m = _mk(
                list(range(n + 1)),
                seq,
                n,
                1,
                max_seq_len,
                rows,
                sl,
                upper=upper,
                positions=d0["positions"],
                is_prefilling=d0["is_prefilling"],
            )
            steps.append(dict(role="draft", draft_index=t + 1, metadata=m))
    return steps


# ---------------------------------------------------------------------------
# V2 (gpu/model_runner.py + gpu/spec_decode/*)
# ---------------------------------------------------------------------------


def v2_chain(
    reqs,
    K,
    bs,
    mml,
    *,
    dcp=None,
    mode="eagle",
    target_pad_reqs=None,
    draft_pad_reqs=None,
    hook=_noop,
    idx_mapping=None,
):
    """mode: 'eagle' (EAGLE/MTP, _multi_step_decode), 'fused'
    (_fused_multi_step_decode: one build at step 1), 'gemma4'
    (advance_draft_positions=False, one build at step 1), 'standalone'
    (standalone_ar: expanded prefill build + decode builds with step+1).
    target_pad_reqs: FULL cudagraph target (uniform decode) padded request
    count. draft_pad_reqs: FULL draft-decode graph padded request count."""
    n = len(reqs)
    W = dcp["world"] if dcp else 1
    T = [r["nc"] + r["q"] for r in reqs]
    upper_t = [T[i] + reqs[i]["opt"] for i in range(n)]
    rej = [r["rej"] for r in reqs]
    q = [r["q"] for r in reqs]
    width = _cdiv(mml, bs * W)
    need = [_cdiv(min(t + K + 2, mml), bs * W) for t in T]
    rows = _alloc_rows(need, width)
    req_idx = np.array(idx_mapping if idx_mapping else list(range(n)), dtype=np.int64)
    steps = []

    # ---- target build ----
    n_pad = target_pad_reqs or n
    qsl = [0]
    for x in q:
        qsl.append(qsl[-1] + x)
    tok = qsl[-1]
    if target_pad_reqs:
        assert len(set(q)) == 1, "FULL target graphs need a uniform decode batch"
        tok_pad = n_pad * q[0]
    else:
        tok_pad = tok
    positions, slots = [], []
    for i, r in enumerate(reqs):
        for j in range(r["q"]):
            p = r["nc"] + j
            positions.append(p)
            slots.append(slot_of(p, rows[i], bs, dcp))
    positions += [0] * (tok_pad - tok)
    slots += [PAD_SLOT] * (tok_pad - tok)
    st = dict(
        seq=T + [0] * (n_pad - n),
        upper=upper_t + [0] * (n_pad - n),
        max_seq_len=max(upper_t),
        T=list(T),
        rej=list(rej),
        step=0,
        dcp_lens=None,
    )
    hook(0, st)
    if dcp and st["dcp_lens"] is None:
        st["dcp_lens"] = dcp_local(st["seq"][:n], dcp) + [0] * (n_pad - n)
    tgt = _mk(
        qsl + [tok] * (n_pad - n),
        st["seq"],
        tok_pad,
        max(q),
        st["max_seq_len"],
        rows + [[0] * width] * (n_pad - n),
        slots,
        upper=st["upper"],
        dcp_lens=st["dcp_lens"] if dcp else None,
        positions=positions,
        is_prefilling=[r["nc"] < r["prompt"] for r in reqs] + [False] * (n_pad - n),
        req_idx=req_idx,
    )
    steps.append(dict(role="target", draft_index=None, metadata=tgt))
    t_seq = st["seq"][:n]
    t_dcp = st["dcp_lens"][:n] if dcp else None

    # ---- standalone_ar: expanded prefill build (step=0) ----
    if mode == "standalone":
        eqsl = [qsl[i] + i for i in range(n + 1)]
        epos, eslots = [], []
        for i in range(n):
            for j in range(q[i] + 1):
                p = min(reqs[i]["nc"] + j, mml - 1)
                epos.append(p)
                eslots.append(slot_of(p, rows[i], bs, dcp))
        st = dict(
            seq=[min(s + 1, mml) for s in t_seq],
            upper=[min(u, mml) for u in upper_t],  # step=0
            max_seq_len=mml,  # standalone draft_max_seq_len = max_model_len
            T=list(T),
            rej=list(rej),
            step=0,
            dcp_lens=None,
            t_dcp=t_dcp,
            prev_seq=list(t_seq),
        )
        hook(len(steps), st)
        if dcp and st["dcp_lens"] is None:
            st["dcp_lens"] = dcp_local(st["seq"], dcp)
        m = _mk(
            eqsl,
            st["seq"],
            eqsl[-1],
            max(q) + 1,
            st["max_seq_len"],
            rows,
            eslots,
            upper=st["upper"],
            dcp_lens=st["dcp_lens"] if dcp else None,
            positions=epos,
            is_prefilling=[False] * n,
        )
        steps.append(dict(role="draft", draft_index=0, metadata=m))

    if K <= 1:
        return steps

    # ---- draft decode steps ----
    if mode == "standalone":
        draft_max = mml
        seq = [min(T[i] - rej[i] + 1, mml) for i in range(n)]
        pos = [min(reqs[i]["nc"] + q[i] - rej[i], mml - 1) for i in range(n)]
        step_range = range(1, K)
    else:
        draft_max = min(max(upper_t) + K, mml)
        advance = mode != "gemma4"
        # prepare_decode_inputs
        seq = [T[i] - rej[i] for i in range(n)]
        pos = [T[i] - rej[i] - 1 for i in range(n)]
        if advance:
            seq = [min(s + 1, mml) for s in seq]
            pos = [min(p + 1, mml - 1) for p in pos]
        step_range = range(1, 2) if mode in ("fused", "gemma4") else range(1, K)
    nd_pad = draft_pad_reqs or n
    for s in step_range:
        if mode == "standalone":
            # positions / seq_lens incremented BEFORE each forward
            pos = [min(p + 1, mml - 1) for p in pos]
            seq = [min(x + 1, mml) for x in seq]
            helper_step = s + 1
        else:
            if s > 1:
                # update_draft_inputs after the previous step's forward
                pos = [min(p + 1, mml - 1) for p in pos]
                seq = [min(x + 1, mml) for x in seq]
            helper_step = s
        full = draft_pad_reqs is not None
        ntok = nd_pad if full else n
        dqsl = list(range(n + 1)) + [n] * (nd_pad - n)
        sl = [slot_of(pos[i], rows[i], bs, dcp) for i in range(n)] + [PAD_SLOT] * (
            ntok - n
        )
        st = dict(
            seq=list(seq) + [0] * (nd_pad - n),
            upper=[min(u + helper_step, mml) for u in upper_t] + [0] * (nd_pad - n),
            max_seq_len=min(draft_max, mml),
            T=list(T),
            rej=list(rej),
            step=helper_step,
            dcp_lens=None,
            t_dcp=t_dcp,
            pos=list(pos),
            upper_t=list(upper_t),
            prev_seq=list(steps[-1]["metadata"].seq_lens.tolist()[:n])
            if steps[-1]["role"] == "draft"
            else list(t_seq),
        )
        hook(len(steps), st)
        seq = list(st["seq"][:n])
        if dcp and st["dcp_lens"] is None:
            st["dcp_lens"] = dcp_local(st["seq"][:n], dcp) + [0] * (nd_pad - n)
        m = _mk(
            dqsl,
            st["seq"],
            ntok,
            1,
            st["max_seq_len"],
            rows + [[0] * width] * (nd_pad - n),
            sl,
            upper=st["upper"],
            dcp_lens=st["dcp_lens"] if dcp else None,
            positions=list(pos) + [0] * (ntok - n),
            is_prefilling=[False] * nd_pad,
        )
        steps.append(dict(role="draft", draft_index=helper_step, metadata=m))
    return steps


# ---------------------------------------------------------------------------
# Case assembly
# ---------------------------------------------------------------------------

CASES: list[dict] = []
_META: dict[str, dict] = {}


def _same(a: CommonAttentionMetadata, b: CommonAttentionMetadata) -> bool:
    for f in (
        "query_start_loc",
        "query_start_loc_cpu",
        "seq_lens",
        "block_table_tensor",
        "slot_mapping",
        "dcp_local_seq_lens",
        "seq_lens_cpu_upper_bound",
        "positions",
        "is_prefilling",
    ):
        x, y = getattr(a, f), getattr(b, f)
        if (x is None) != (y is None):
            return False
        if x is not None and (x.shape != y.shape or not torch.equal(x, y)):
            return False
    for f in ("num_reqs", "num_actual_tokens", "max_query_len", "max_seq_len", "causal"):
        if getattr(a, f) != getattr(b, f):
            return False
    return True


def _add(cid, label, what, src, gen, kwargs, *, bs, mml, dcp=None, kind, hook=None):
    assert cid not in _META, cid
    healthy = gen(**kwargs, bs=bs, mml=mml, **({"dcp": dcp} if gen is v2_chain else {}))
    if label == "healthy":
        steps, fault_step = healthy, None
    else:
        assert hook is not None
        steps = gen(
            **kwargs, bs=bs, mml=mml, hook=hook, **({"dcp": dcp} if gen is v2_chain else {})
        )
        assert len(steps) == len(healthy)
        diffs = [
            i for i in range(len(steps)) if not _same(steps[i]["metadata"], healthy[i]["metadata"])
        ]
        assert diffs, f"{cid}: fault hook changed nothing"
        fault_step = diffs[0]
    CASES.append(
        dict(
            id=cid,
            label=label,
            fault_step=fault_step,
            what=what,
            source_idiom=src,
            steps=steps,
            block_size=bs,
            max_model_len=mml,
            dcp=dcp,
        )
    )
    _META[cid] = dict(kind=kind, reqs=kwargs["reqs"], K=kwargs["K"], healthy=healthy)


def _at(idx_pred, fn):
    """Hook that applies fn(st) when idx_pred(step_idx, st) is true."""

    def hook(step_idx, st):
        if idx_pred(step_idx, st):
            fn(st)

    return hook


def _at_step(k, fn):
    return _at(lambda i, st: i == k, fn)


def _from_step(k, fn):
    return _at(lambda i, st: i >= k, fn)


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------

# Common V1 batches --------------------------------------------------------
V1_DEC3 = [R(40, 4, 3, 1, 10), R(95, 4, 3, 0, 20), R(17, 4, 3, 3, 5)]
V1_DEC4 = [R(200, 3, 2, 2, 100), R(31, 3, 2, 0, 12), R(64, 3, 2, 1, 30), R(7, 3, 2, 0, 3)]
# decode rows + a chunked prefill (partial) + a prefill that completes now
V1_MIXED = [
    R(120, 3, 2, 1, 50),
    R(64, 48, 0, 0, 300),  # partial prefill chunk
    R(0, 21, 0, 0, 21),  # whole prompt, completes this step
    R(33, 3, 2, 0, 10),
]


def _build_v1():
    # ---------------- healthy ----------------
    _add(
        "v1_eagle_padded_mixed_rejections",
        "healthy",
        "V1 EAGLE padded drafter batch, K=3, three decodes with 1/0/3 rejected drafts.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=V1_DEC3, K=3),
        bs=16,
        mml=2048,
        kind="v1",
    )
    _add(
        "v1_eagle_padded_all_drafts_rejected",
        "healthy",
        "V1 EAGLE padded batch where every draft was rejected (rewind equals the draft count).",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=[R(50, 3, 2, 2, 9), R(12, 3, 2, 2, 4)], K=4),
        bs=16,
        mml=1024,
        kind="v1",
    )
    _add(
        "v1_eagle_all_accepted_block_boundary",
        "healthy",
        "V1 EAGLE, all drafts accepted; draft positions walk across a 16-token block boundary.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=[R(12, 3, 2, 0, 4), R(44, 3, 2, 0, 8)], K=4),
        bs=16,
        mml=512,
        kind="v1",
    )
    _add(
        "v1_eagle_nonpadded_prepare_inputs",
        "healthy",
        "V1 EAGLE with disable_padded_drafter_batch: prepare_inputs shrinks queries and seq_lens "
        "by the rejected count once; no second rewind in the loop.",
        SRC_V1_NONPADDED,
        v1_chain,
        dict(reqs=V1_DEC4, K=3, mode="nonpadded"),
        bs=16,
        mml=2048,
        kind="v1",
    )
    _add(
        "v1_eagle_mixed_chunked_prefill",
        "healthy",
        "V1 EAGLE padded batch mixing decodes, a partial prefill chunk and a completing prompt.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=V1_MIXED, K=3),
        bs=16,
        mml=4096,
        kind="v1",
    )
    _add(
        "v1_eagle_first_draft_after_prefill_nospec",
        "healthy",
        "V1 EAGLE, no drafts scheduled (prefills only): target metadata is handed to the drafter "
        "and advanced in place; positions/is_prefilling keep the target's values.",
        SRC_V1_NOSPEC,
        v1_chain,
        dict(reqs=[R(0, 37, 0, 0, 37), R(64, 30, 0, 0, 94)], K=3, mode="nospec"),
        bs=16,
        mml=1024,
        kind="v1",
    )
    _add(
        "v1_eagle_near_max_model_len_reset",
        "healthy",
        "V1 EAGLE row ending at max_model_len-1: the draft kernel pads the slot and resets "
        "seq_len to 1 past the limit, then keeps counting from position 0.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=[R(124, 3, 2, 0, 60), R(30, 3, 2, 1, 10)], K=5),
        bs=16,
        mml=128,
        kind="v1",
    )
    _add(
        "v1_eagle_target_cudagraph_padded",
        "healthy",
        "V1 target build padded for a full cudagraph (5 real rows in 8, tokens padded); the "
        "drafter gets the unpadded() view.",
        SRC_V1_PADDED,
        v1_chain,
        dict(
            reqs=[R(10, 3, 2, 1, 4), R(80, 3, 2, 0, 40), R(33, 3, 2, 2, 9), R(5, 3, 2, 0, 2), R(150, 3, 2, 1, 77)],
            K=3,
            target_pad_reqs=8,
            target_pad_tokens=24,
        ),
        bs=16,
        mml=2048,
        kind="v1",
    )
    _add(
        "v1_draft_model_chain",
        "healthy",
        "V1 DraftModelProposer (padded): queries and seq_lens extended by one slot; "
        "seq_lens_cpu_upper_bound is left unextended by extend_all_queries_by_N.",
        SRC_V1_DRAFT_MODEL,
        v1_chain,
        dict(reqs=[R(40, 4, 3, 2, 10), R(71, 4, 3, 0, 30), R(9, 4, 3, 1, 3)], K=3, mode="draft_model"),
        bs=16,
        mml=1024,
        kind="v1_draft_model",
    )
    _add(
        "v1_eagle_single_draft_token",
        "healthy",
        "V1 EAGLE with K=1: the only draft build is the first pass over the target's lengths.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=[R(23, 2, 1, 1, 8), R(61, 2, 1, 0, 11)], K=1),
        bs=16,
        mml=1024,
        kind="v1",
    )
    _add(
        "v1_eagle_one_token_prompt_bs64",
        "healthy",
        "V1 EAGLE, block_size 64, a one-token prompt next to a long decode; draft seq_lens 2,3.",
        SRC_V1_NOSPEC,
        v1_chain,
        dict(reqs=[R(0, 1, 0, 0, 1), R(700, 1, 0, 0, 300)], K=3, mode="nospec"),
        bs=64,
        mml=4096,
        kind="v1",
    )

    # ---------------- faults ----------------
    def add_rej(st):
        st["seq"] = [st["seq"][i] + st["rej"][i] for i in range(len(st["rej"]))]

    _add(
        "v1_eagle_rewind_missing",
        "fault",
        "First draft-loop build keeps the rejected drafts in seq_lens (seq_lens -= "
        "num_rejected_tokens_gpu skipped).",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=V1_DEC3, K=3),
        bs=16,
        mml=2048,
        kind="v1",
        hook=_at_step(2, add_rej),
    )

    def sub_rej(st):
        st["seq"] = [st["seq"][i] - st["rej"][i] for i in range(len(st["rej"]))]

    _add(
        "v1_eagle_rewind_doubled",
        "fault",
        "Rejected drafts subtracted twice before the first draft-loop build.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=V1_DEC3, K=3),
        bs=16,
        mml=2048,
        kind="v1",
        hook=_at_step(2, sub_rej),
    )

    def stale_prev(st):
        st["seq"] = list(st["prev_seq"])

    _add(
        "v1_eagle_step2_not_advanced",
        "fault",
        "Second draft-loop build reuses the previous draft step's seq_lens while slots advanced.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=V1_DEC4, K=4),
        bs=16,
        mml=2048,
        kind="v1",
        hook=_at_step(3, stale_prev),
    )

    def plus1(st):
        st["seq"] = [s + 1 for s in st["seq"]]

    _add(
        "v1_eagle_step2_advanced_twice",
        "fault",
        "seq_lens incremented twice for draft_index 2 (kernel and a second += 1).",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=V1_DEC4, K=4),
        bs=16,
        mml=2048,
        kind="v1",
        hook=_at_step(3, plus1),
    )

    def swap02(st):
        s = st["seq"]
        s[0], s[2] = s[2], s[0]

    _add(
        "v1_eagle_rows_swapped",
        "fault",
        "Draft step 1 seq_lens of requests 0 and 2 exchanged (row order mismatch).",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=V1_DEC3, K=3),
        bs=16,
        mml=2048,
        kind="v1",
        hook=_at_step(2, swap02),
    )

    def unclamp(st):
        # row 0 runs past max_model_len: kernel would write 1, bug writes prev+1
        st["seq"][0] = st["prev_seq"][0] + 1

    _add(
        "v1_eagle_past_max_model_len",
        "fault",
        "Row at max_model_len gets seq_len = max_model_len+1 instead of the kernel's reset to 1.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=[R(124, 3, 2, 0, 60), R(30, 3, 2, 1, 10)], K=5),
        bs=16,
        mml=128,
        kind="v1",
        hook=_at_step(3, unclamp),
    )

    def stale_max(st):
        st["max_seq_len"] = st["max_seq_len"] - 1

    _add(
        "v1_eagle_max_seq_len_not_advanced",
        "fault",
        "max_seq_len left at the first pass's value while seq_lens advance in the draft loop.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=[R(40, 3, 2, 1, 10), R(300, 3, 2, 0, 100)], K=3),
        bs=16,
        mml=2048,
        kind="v1",
        hook=_at_step(2, stale_max),
    )

    def target_seq(st):
        st["seq"] = list(st["T"])

    _add(
        "v1_eagle_target_seq_lens_in_draft_step",
        "fault",
        "Draft step 2 built with the target's seq_lens (buffer re-read) instead of the advanced ones.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=V1_DEC4, K=3),
        bs=16,
        mml=2048,
        kind="v1",
        hook=_at_step(3, target_seq),
    )
    _add(
        "v1_eagle_nonpadded_double_rewind",
        "fault",
        "prepare_inputs already removed rejected tokens, yet the loop subtracts them again.",
        SRC_V1_NONPADDED,
        v1_chain,
        dict(reqs=V1_DEC4, K=3, mode="nonpadded"),
        bs=16,
        mml=2048,
        kind="v1",
        hook=_at_step(2, sub_rej),
    )

    def no_rewind_prep(st):
        st["seq"] = list(st["T"])
        st["upper"] = list(st["T"])
        st["max_seq_len"] = max(st["T"])

    _add(
        "v1_eagle_nonpadded_prepare_inputs_no_rewind",
        "fault",
        "prepare_inputs shrinks query_start_loc but keeps seq_lens at the target's upper bound.",
        SRC_V1_NONPADDED,
        v1_chain,
        dict(reqs=V1_DEC4, K=3, mode="nonpadded"),
        bs=16,
        mml=2048,
        kind="v1",
        hook=_at_step(1, no_rewind_prep),
    )

    def misaligned_rej(st):
        r = st["rej"]
        shifted = [r[-1]] + r[:-1]
        st["seq"] = [st["seq"][i] + r[i] - shifted[i] for i in range(len(r))]

    _add(
        "v1_eagle_mixed_rejections_misaligned",
        "fault",
        "In a mixed chunked-prefill batch the per-request rewind is applied one row off, so the "
        "prefill chunk is rewound by a neighbour's rejections.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=V1_MIXED, K=3),
        bs=16,
        mml=4096,
        kind="v1",
        hook=_at_step(2, misaligned_rej),
    )
    _add(
        "v1_draft_model_rewind_missing",
        "fault",
        "DraftModelProposer chain: first loop build keeps rejected slots in seq_lens.",
        SRC_V1_DRAFT_MODEL,
        v1_chain,
        dict(reqs=[R(40, 4, 3, 2, 10), R(71, 4, 3, 0, 30), R(9, 4, 3, 1, 3)], K=3, mode="draft_model"),
        bs=16,
        mml=1024,
        kind="v1_draft_model",
        hook=_at_step(2, add_rej),
    )

    def not_extended(st):
        st["seq"] = [s - 1 for s in st["seq"]]

    _add(
        "v1_draft_model_first_pass_not_extended",
        "fault",
        "Draft-model first pass extends every query by one slot but leaves seq_lens at the target's.",
        SRC_V1_DRAFT_MODEL,
        v1_chain,
        dict(reqs=[R(40, 4, 3, 2, 10), R(71, 4, 3, 0, 30), R(9, 4, 3, 1, 3)], K=3, mode="draft_model"),
        bs=16,
        mml=1024,
        kind="v1_draft_model",
        hook=_at_step(1, not_extended),
    )

    def stale_chunk(st):
        # row 1 is a partial prefill chunk: seq_len left at its computed count
        st["seq"][1] = 64

    _add(
        "v1_target_chunked_prefill_seq_len_stale",
        "fault",
        "Target build: the chunked-prefill row's seq_len is the previous chunk's end, not "
        "num_computed + num_scheduled.",
        SRC_V1_TARGET,
        v1_chain,
        dict(reqs=V1_MIXED, K=3),
        bs=16,
        mml=4096,
        kind="v1",
        hook=_at_step(0, stale_chunk),
    )

    def no_plus1(st):
        st["seq"] = list(st["prev_seq"])

    _add(
        "v1_eagle_block_boundary_not_advanced",
        "fault",
        "First loop build at a block boundary: slot moves into the next block but seq_lens are not "
        "incremented.",
        SRC_V1_PADDED,
        v1_chain,
        dict(reqs=[R(12, 3, 2, 0, 4), R(44, 3, 2, 0, 8)], K=4),
        bs=16,
        mml=512,
        kind="v1",
        hook=_at_step(2, no_plus1),
    )


# Common V2 batches --------------------------------------------------------
V2_DEC3 = [R(40, 4, 3, 1, 10), R(95, 4, 3, 0, 20), R(17, 4, 3, 3, 5)]
V2_DEC5 = [
    R(100, 3, 2, 2, 30),
    R(58, 3, 2, 0, 20),
    R(250, 3, 2, 1, 99),
    R(6, 3, 2, 0, 2),
    R(129, 3, 2, 1, 40),
]
V2_MIXED = [
    R(300, 3, 2, 1, 100),
    R(128, 64, 0, 0, 500),  # partial prefill chunk
    R(0, 45, 0, 0, 45),  # completing prompt
    R(77, 3, 2, 0, 30),
]


def _build_v2():
    # ---------------- healthy ----------------
    _add(
        "v2_eagle_eager_chain",
        "healthy",
        "V2 EAGLE, eager draft decodes, K=4, rejections 1/0/3.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=V2_DEC3, K=4),
        bs=16,
        mml=2048,
        kind="v2",
    )
    _add(
        "v2_eagle_full_cudagraph_padded",
        "healthy",
        "V2 EAGLE, FULL target graph (5 rows padded to 8) and FULL draft-decode graph "
        "(padded rows: zero-length queries, seq_len 0, null block row).",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=V2_DEC5, K=3, target_pad_reqs=8, draft_pad_reqs=8),
        bs=16,
        mml=2048,
        kind="v2",
    )
    _add(
        "v2_eagle_near_max_model_len_clamp",
        "healthy",
        "V2 EAGLE row reaching max_model_len: positions clamp at max_model_len-1 and seq_len "
        "stays at max_model_len for later steps.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=[R(92, 3, 2, 0, 50), R(20, 3, 2, 2, 8)], K=5),
        bs=16,
        mml=96,
        kind="v2",
    )
    _add(
        "v2_eagle_async_optimistic_upper_bound",
        "healthy",
        "V2 async spec decode: CPU upper bound is optimistic (previous drafts assumed accepted), "
        "so seq_lens_cpu_upper_bound exceeds seq_lens on some rows.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=[R(60, 4, 3, 1, 10, opt=2), R(33, 4, 3, 0, 8, opt=0), R(140, 4, 3, 2, 30, opt=3)], K=4),
        bs=16,
        mml=2048,
        kind="v2",
    )
    _add(
        "v2_eagle_mixed_chunked_prefill",
        "healthy",
        "V2 EAGLE: eager mixed target (decodes, partial chunk, completing prompt), then FULL "
        "draft decodes padded from 4 to 8 rows.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=V2_MIXED, K=3, draft_pad_reqs=8, idx_mapping=[5, 2, 7, 0]),
        bs=16,
        mml=4096,
        kind="v2",
    )
    _add(
        "v2_gemma4_constant_positions",
        "healthy",
        "V2 Gemma4 MTP (Q-only, advance_draft_positions=False): one draft build at step 1 with "
        "seq_len = target - rejected, not advanced.",
        SRC_V2_GEMMA4,
        v2_chain,
        dict(reqs=V2_DEC3, K=4, mode="gemma4"),
        bs=16,
        mml=2048,
        kind="v2_gemma4",
    )
    _add(
        "v2_standalone_ar_chain",
        "healthy",
        "V2 standalone draft model: expanded prefill build (each query +1, seq_len target+1, "
        "upper bound from step 0) then decode builds with the helper's step+1.",
        SRC_V2_STANDALONE,
        v2_chain,
        dict(reqs=[R(40, 4, 3, 2, 10), R(71, 4, 3, 0, 30), R(9, 4, 3, 1, 3)], K=3, mode="standalone"),
        bs=16,
        mml=1024,
        kind="v2_standalone",
    )
    _add(
        "v2_eagle_fused_single_build",
        "healthy",
        "V2 EAGLE with in-place decode-metadata updates: only the step-1 build is made.",
        SRC_V2_FUSED,
        v2_chain,
        dict(reqs=V2_DEC5, K=4, mode="fused"),
        bs=32,
        mml=2048,
        kind="v2",
    )

    # ---------------- faults ----------------
    def target_seq(st):
        st["seq"] = list(st["T"]) + st["seq"][len(st["T"]) :]

    _add(
        "v2_eagle_step1_uses_target_seq_lens",
        "fault",
        "Draft step 1 built with input_batch.seq_lens (target, including all drafts) instead of "
        "target - rejected + 1.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=V2_DEC3, K=4),
        bs=16,
        mml=2048,
        kind="v2",
        hook=_at_step(1, target_seq),
    )

    def stale_prev(st):
        n = len(st["T"])
        st["seq"] = list(st["prev_seq"]) + st["seq"][n:]

    _add(
        "v2_eagle_step2_stale_seq_lens",
        "fault",
        "Draft step 2 sees step 1's seq_lens (update_draft_inputs did not advance them) while "
        "positions advanced.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=V2_DEC3, K=4),
        bs=16,
        mml=2048,
        kind="v2",
        hook=_at_step(2, stale_prev),
    )

    def plus1_real(st):
        n = len(st["T"])
        st["seq"] = [s + 1 for s in st["seq"][:n]] + st["seq"][n:]

    _add(
        "v2_eagle_step2_double_advance",
        "fault",
        "seq_lens advanced twice between draft steps 1 and 2.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=V2_DEC5, K=3, target_pad_reqs=8, draft_pad_reqs=8),
        bs=16,
        mml=2048,
        kind="v2",
        hook=_at_step(2, plus1_real),
    )

    def add_rej(st):
        n = len(st["T"])
        st["seq"] = [st["seq"][i] + st["rej"][i] for i in range(n)] + st["seq"][n:]

    _add(
        "v2_eagle_rewind_missing",
        "fault",
        "prepare_decode_inputs ignores num_rejected: draft seq_lens = target + step.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=V2_DEC5, K=3, target_pad_reqs=8, draft_pad_reqs=8),
        bs=16,
        mml=2048,
        kind="v2",
        hook=_at_step(1, add_rej),
    )

    def sub_rej(st):
        n = len(st["T"])
        st["seq"] = [st["seq"][i] - st["rej"][i] for i in range(n)] + st["seq"][n:]

    _add(
        "v2_eagle_rewind_doubled",
        "fault",
        "Rejected drafts subtracted twice when preparing the draft decode inputs.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=V2_DEC3, K=3),
        bs=16,
        mml=2048,
        kind="v2",
        hook=_at_step(1, sub_rej),
    )

    def rotate(st):
        n = len(st["T"])
        s = st["seq"][:n]
        st["seq"] = s[1:] + s[:1] + st["seq"][n:]

    _add(
        "v2_eagle_seq_lens_rows_rotated",
        "fault",
        "Draft step seq_lens gathered with a shifted idx_mapping: each row holds the next request's length.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=V2_MIXED, K=3, draft_pad_reqs=8, idx_mapping=[5, 2, 7, 0]),
        bs=16,
        mml=4096,
        kind="v2",
        hook=_at_step(1, rotate),
    )

    def unclamp(st):
        # row 0 would be max_model_len + 1 without the clamp
        st["seq"][0] = st["prev_seq"][0] + 1

    _add(
        "v2_eagle_past_max_model_len",
        "fault",
        "Draft seq_len not clamped: grows to max_model_len+1 while the position stays clamped.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=[R(92, 3, 2, 0, 50), R(20, 3, 2, 2, 8)], K=5),
        bs=16,
        mml=96,
        kind="v2",
        hook=_at_step(3, unclamp),
    )

    def pad_stale(st):
        n = len(st["T"])
        st["seq"] = st["seq"][:n] + [211, 57, 9][: len(st["seq"]) - n] + [0] * max(
            0, len(st["seq"]) - n - 3
        )

    _add(
        "v2_eagle_full_graph_padded_rows_stale",
        "fault",
        "FULL draft-decode graph: padded rows carry stale seq_lens from an earlier, larger batch "
        "instead of 0.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=V2_DEC5, K=3, target_pad_reqs=8, draft_pad_reqs=8),
        bs=16,
        mml=2048,
        kind="v2",
        hook=_from_step(1, pad_stale),
    )

    def max_from_target(st):
        st["max_seq_len"] = max(st["upper_t"])

    _add(
        "v2_eagle_max_seq_len_from_target",
        "fault",
        "Draft builds use the target's max_seq_len (no +num_speculative_tokens headroom) though "
        "draft seq_lens grew past it.",
        SRC_V2_TDAR,
        v2_chain,
        dict(reqs=[R(40, 4, 3, 1, 10), R(300, 4, 3, 0, 20)], K=4),
        bs=16,
        mml=2048,
        kind="v2",
        hook=_from_step(1, max_from_target),
    )

    _add(
        "v2_gemma4_seq_lens_advanced",
        "fault",
        "Gemma4 (constant positions) draft build advances seq_lens by one while the position and "
        "slot stay on the last accepted token.",
        SRC_V2_GEMMA4,
        v2_chain,
        dict(reqs=V2_DEC3, K=4, mode="gemma4"),
        bs=16,
        mml=2048,
        kind="v2_gemma4",
        hook=_at_step(1, plus1_real),
    )

    def minus1_real(st):
        n = len(st["T"])
        st["seq"] = [s - 1 for s in st["seq"][:n]] + st["seq"][n:]

    _add(
        "v2_standalone_decode_missing_correction_token",
        "fault",
        "Standalone draft decode starts from target - rejected (forgetting the correction token "
        "inserted during prefill), one short on every step.",
        SRC_V2_STANDALONE,
        v2_chain,
        dict(reqs=[R(40, 4, 3, 2, 10), R(71, 4, 3, 0, 30), R(9, 4, 3, 1, 3)], K=3, mode="standalone"),
        bs=16,
        mml=1024,
        kind="v2_standalone",
        hook=_at_step(2, minus1_real),
    )
    _add(
        "v2_standalone_prefill_seq_not_expanded",
        "fault",
        "Standalone expanded prefill (every query +1 slot) keeps the target's seq_lens.",
        SRC_V2_STANDALONE,
        v2_chain,
        dict(reqs=[R(40, 4, 3, 2, 10), R(71, 4, 3, 0, 30), R(9, 4, 3, 1, 3)], K=3, mode="standalone"),
        bs=16,
        mml=1024,
        kind="v2_standalone",
        hook=_at_step(1, minus1_real),
    )

    def tgt_prev_iter(st):
        # decode row 3 keeps the length of the previous iteration
        st["seq"][3] = 77

    _add(
        "v2_target_seq_len_previous_iteration",
        "fault",
        "V2 mixed target build: one decode row's seq_len is num_computed_tokens (previous "
        "iteration), not num_computed + num_scheduled.",
        SRC_V2_TARGET,
        v2_chain,
        dict(reqs=V2_MIXED, K=3, draft_pad_reqs=8, idx_mapping=[5, 2, 7, 0]),
        bs=16,
        mml=4096,
        kind="v2",
        hook=_at_step(0, tgt_prev_iter),
    )


# DCP (V2 only: the V1 draft loop's slot kernel is not DCP aware) ------------


def _build_dcp():
    D2_0 = {"world": 2, "rank": 0, "interleave": 1}
    D2_1 = {"world": 2, "rank": 1, "interleave": 1}
    D4_3 = {"world": 4, "rank": 3, "interleave": 1}
    D4_1_16 = {"world": 4, "rank": 1, "interleave": 16}
    D4_2_4 = {"world": 4, "rank": 2, "interleave": 4}
    D8_5_2 = {"world": 8, "rank": 5, "interleave": 2}
    D2_1_16 = {"world": 2, "rank": 1, "interleave": 16}
    D4_2 = {"world": 4, "rank": 2, "interleave": 1}
    D2_0_8 = {"world": 2, "rank": 0, "interleave": 8}

    DC3 = [R(40, 4, 3, 1, 10), R(95, 4, 3, 0, 20), R(17, 4, 3, 3, 5)]
    SHORT = [R(0, 2, 0, 0, 2), R(1, 2, 1, 0, 1), R(9, 2, 1, 1, 4), R(130, 2, 1, 0, 60)]
    DC6 = [
        R(100, 3, 2, 2, 30),
        R(58, 3, 2, 0, 20),
        R(250, 3, 2, 1, 99),
        R(6, 3, 2, 0, 2),
        R(129, 3, 2, 1, 40),
        R(511, 3, 2, 2, 200),
    ]
    ASYNC = [R(60, 4, 3, 1, 10, opt=2), R(33, 4, 3, 0, 8, opt=0), R(140, 4, 3, 2, 30, opt=3)]
    NEAR = [R(188, 3, 2, 0, 50), R(40, 3, 2, 1, 8), R(7, 3, 2, 2, 2)]
    UNI4 = [R(64, 3, 2, 1, 30), R(65, 3, 2, 0, 30), R(200, 3, 2, 2, 90)]

    # ---------------- healthy ----------------
    _add(
        "v2_dcp_w2_r0_i1_chain",
        "healthy",
        "V2 EAGLE under DCP (world 2, rank 0, interleave 1): each draft step recomputes rank-local "
        "lengths from its own seq_lens.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=DC3, K=4),
        bs=16,
        mml=2048,
        dcp=D2_0,
        kind="v2",
    )
    _add(
        "v2_dcp_w2_r1_i1_all_rejected",
        "healthy",
        "DCP world 2 rank 1, every draft rejected; rank-local lengths follow the rewound lengths.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=[R(51, 3, 2, 2, 9), R(12, 3, 2, 2, 4), R(300, 3, 2, 2, 100)], K=3),
        bs=16,
        mml=2048,
        dcp=D2_1,
        kind="v2",
    )
    _add(
        "v2_dcp_w4_r3_short_rows_zero_local",
        "healthy",
        "DCP world 4 rank 3 with very short requests: real rows whose local length is 0 on this rank.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=SHORT, K=3),
        bs=16,
        mml=1024,
        dcp=D4_3,
        kind="v2",
    )
    _add(
        "v2_dcp_w4_r1_i16_bs64",
        "healthy",
        "DCP world 4 rank 1, interleave 16, block_size 64, mixed chunked-prefill target.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=V2_MIXED, K=3),
        bs=64,
        mml=8192,
        dcp=D4_1_16,
        kind="v2",
    )
    _add(
        "v2_dcp_w8_r5_i2_full_graph_padded",
        "healthy",
        "DCP world 8 rank 5 interleave 2; FULL draft-decode graph 6 rows padded to 8 (local 0 on pads).",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=DC6, K=3, draft_pad_reqs=8),
        bs=16,
        mml=4096,
        dcp=D8_5_2,
        kind="v2",
    )
    _add(
        "v2_dcp_w2_r0_i8_near_max_model_len",
        "healthy",
        "DCP world 2 rank 0 interleave 8, a row clamped at max_model_len across draft steps.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=NEAR, K=5),
        bs=16,
        mml=192,
        dcp=D2_0_8,
        kind="v2",
    )
    _add(
        "v2_dcp_w4_r2_full_target_uniform_decode",
        "healthy",
        "DCP world 4 rank 2: FULL uniform-decode target (3 rows padded to 4) and FULL draft decodes.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=UNI4, K=4, target_pad_reqs=4, draft_pad_reqs=4),
        bs=16,
        mml=2048,
        dcp=D4_2,
        kind="v2",
    )

    # ---------------- faults ----------------
    def stale_target_dcp(st):
        n = len(st["T"])
        st["dcp_lens"] = list(st["t_dcp"]) + [0] * (len(st["seq"]) - n)

    _add(
        "v2_dcp_w2_r1_draft_reuses_target_local",
        "fault",
        "Draft steps reuse the target's dcp_local_seq_lens although draft seq_lens were rewound "
        "and advanced (the upstream stale-DCP bug).",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=[R(51, 3, 2, 2, 9), R(12, 3, 2, 2, 4), R(300, 3, 2, 2, 100)], K=3),
        bs=16,
        mml=2048,
        dcp=D2_1,
        kind="v2",
        hook=_from_step(1, stale_target_dcp),
    )
    _add(
        "v2_dcp_w4_r2_i4_stale_target_local",
        "fault",
        "DCP world 4 rank 2 interleave 4: target-local lengths reused for all draft steps; they "
        "first go wrong once a draft step crosses into this rank's interleave chunk.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=[R(34, 4, 3, 0, 10), R(81, 4, 3, 3, 30), R(8, 4, 3, 1, 3)], K=4),
        bs=16,
        mml=2048,
        dcp=D4_2_4,
        kind="v2",
        hook=_from_step(1, stale_target_dcp),
    )

    def wrong_rank(rank):
        def fn(st):
            n = len(st["T"])
            d = dict(st["_dcp"])
            d["rank"] = rank
            st["dcp_lens"] = dcp_local(st["seq"][:n], d) + [0] * (len(st["seq"]) - n)

        return fn

    def with_dcp(dcp, fn):
        def inner(st):
            st["_dcp"] = dcp
            fn(st)

        return inner

    _add(
        "v2_dcp_w4_r3_local_for_rank0",
        "fault",
        "Rank 3 of 4 hands its draft builder the rank-0 share of the lengths.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=SHORT, K=3),
        bs=16,
        mml=1024,
        dcp=D4_3,
        kind="v2",
        hook=_from_step(1, with_dcp(D4_3, wrong_rank(0))),
    )

    def wrong_il(il):
        def fn(st):
            n = len(st["T"])
            d = dict(st["_dcp"])
            d["interleave"] = il
            st["dcp_lens"] = dcp_local(st["seq"][:n], d) + [0] * (len(st["seq"]) - n)

        return fn

    _add(
        "v2_dcp_w2_r1_i16_local_with_interleave_1",
        "fault",
        "Local lengths computed with interleave 1 although the KV cache is interleaved in 16s.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=[R(40, 4, 3, 1, 10), R(95, 4, 3, 0, 20), R(17, 4, 3, 3, 5), R(250, 4, 3, 2, 70)], K=3),
        bs=32,
        mml=2048,
        dcp=D2_1_16,
        kind="v2",
        hook=_from_step(1, with_dcp(D2_1_16, wrong_il(1))),
    )

    def from_upper(st):
        n = len(st["T"])
        st["dcp_lens"] = dcp_local(st["upper"][:n], st["_dcp"]) + [0] * (len(st["seq"]) - n)

    _add(
        "v2_dcp_async_local_from_upper_bound",
        "fault",
        "Async spec decode: draft-local lengths derived from seq_lens_cpu_upper_bound (optimistic) "
        "instead of the step's seq_lens.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=ASYNC, K=4),
        bs=16,
        mml=2048,
        dcp=D2_0,
        kind="v2",
        hook=_from_step(1, with_dcp(D2_0, from_upper)),
    )

    def lag(st):
        n = len(st["T"])
        st["dcp_lens"] = dcp_local(st["prev_seq"], st["_dcp"]) + [0] * (len(st["seq"]) - n)

    _add(
        "v2_dcp_w8_r5_local_lags_one_step",
        "fault",
        "Rank-local lengths recomputed before the seq_lens advance, so step s carries step s-1's share.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=DC6, K=4, draft_pad_reqs=8),
        bs=16,
        mml=4096,
        dcp=D8_5_2,
        kind="v2",
        hook=_from_step(2, with_dcp(D8_5_2, lag)),
    )

    def global_copy(st):
        n = len(st["T"])
        st["dcp_lens"] = list(st["seq"][:n]) + [0] * (len(st["seq"]) - n)

    _add(
        "v2_dcp_w2_r0_local_equals_global",
        "fault",
        "dcp_local_seq_lens filled with the global draft seq_lens (no per-rank split).",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=DC3, K=3),
        bs=16,
        mml=2048,
        dcp=D2_0,
        kind="v2",
        hook=_from_step(1, global_copy),
    )

    def tgt_dcp_prev(st):
        n = len(st["T"])
        # local share of the lengths before this step's scheduled tokens
        prev = [st["T"][i] - 3 for i in range(n)]
        st["dcp_lens"] = dcp_local(prev, st["_dcp"]) + [0] * (len(st["seq"]) - n)

    _add(
        "v2_dcp_target_local_from_previous_iteration",
        "fault",
        "FULL uniform-decode target build carries the previous iteration's rank-local lengths.",
        SRC_V2_TARGET,
        v2_chain,
        dict(reqs=UNI4, K=4, target_pad_reqs=4, draft_pad_reqs=4),
        bs=16,
        mml=2048,
        dcp=D4_2,
        kind="v2",
        hook=_at_step(0, with_dcp(D4_2, tgt_dcp_prev)),
    )

    def pad_local(st):
        n = len(st["T"])
        st["dcp_lens"] = dcp_local(st["seq"][:n], st["_dcp"]) + [31, 4][: len(st["seq"]) - n]

    _add(
        "v2_dcp_full_graph_padded_rows_local_stale",
        "fault",
        "FULL draft-decode graph: padded rows keep stale rank-local lengths instead of 0.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=DC6, K=3, draft_pad_reqs=8),
        bs=16,
        mml=4096,
        dcp=D8_5_2,
        kind="v2",
        hook=_from_step(1, with_dcp(D8_5_2, pad_local)),
    )

    def unclamped_local(st):
        n = len(st["T"])
        raw = [st["prev_seq"][i] + 1 for i in range(n)]
        st["dcp_lens"] = dcp_local(raw, st["_dcp"]) + [0] * (len(st["seq"]) - n)

    _add(
        "v2_dcp_local_from_unclamped_length",
        "fault",
        "Near max_model_len the global seq_len is clamped but the rank-local share is taken from "
        "the unclamped length.",
        SRC_V2_DCP,
        v2_chain,
        dict(reqs=NEAR, K=5),
        bs=16,
        mml=192,
        dcp=D2_0_8,
        kind="v2",
        hook=_from_step(2, with_dcp(D2_0_8, unclamped_local)),
    )


_build_v1()
_build_v2()
_build_dcp()


# ---------------------------------------------------------------------------
# self_check: relations a correct build keeps (from reading vLLM 0.33.0)
# ---------------------------------------------------------------------------


def _qlens(m):
    qs = m.query_start_loc_cpu.tolist()
    return [qs[i + 1] - qs[i] for i in range(m.num_reqs)]


def build_violations(case: dict, k: int, *, with_chain: bool = True) -> list[str]:
    """Relations for build k of a case. Returns a list of violated relations."""
    v: list[str] = []
    st = case["steps"][k]
    m: CommonAttentionMetadata = st["metadata"]
    bs, mml, dcp = case["block_size"], case["max_model_len"], case["dcp"]
    meta = _META.get(case["id"], {})
    kind = meta.get("kind", "")
    n = m.num_reqs
    # --- shapes / dtypes ---
    if m.seq_lens.dtype != torch.int32 or m.seq_lens.shape != (n,):
        v.append("seq_lens int32[num_reqs]")
    if m.query_start_loc_cpu.dtype != torch.int32 or m.query_start_loc_cpu.shape != (n + 1,):
        v.append("query_start_loc_cpu int32[num_reqs+1]")
    if not torch.equal(m.query_start_loc, m.query_start_loc_cpu):
        v.append("query_start_loc == query_start_loc_cpu")
    if m.block_table_tensor.dtype != torch.int32 or m.block_table_tensor.shape[0] != n:
        v.append("block_table int32[num_reqs, *]")
    if m.slot_mapping.dtype != torch.int64 or m.slot_mapping.shape[0] != m.num_actual_tokens:
        v.append("slot_mapping int64[num_actual_tokens]")
    qs = m.query_start_loc_cpu.tolist()
    ql = _qlens(m)
    if qs[0] != 0 or any(x < 0 for x in ql) or qs[-1] > m.num_actual_tokens:
        v.append("query_start_loc monotone from 0, ends <= num_actual_tokens")
    if m.max_query_len < max(ql):
        v.append("max_query_len >= longest query")
    seq = m.seq_lens.tolist()
    real = [i for i in range(n) if ql[i] > 0]
    # --- length bounds ---
    for i in range(n):
        if seq[i] < 0 or seq[i] > mml:
            v.append(f"0 <= seq_lens[{i}] <= max_model_len")
        if ql[i] == 0 and seq[i] != 0:
            v.append(f"padded row {i} has seq_len 0")
        if ql[i] > 0 and seq[i] < ql[i]:
            v.append(f"seq_lens[{i}] >= query_len")
    if max(seq) > m.max_seq_len or m.max_seq_len > mml:
        v.append("max(seq_lens) <= max_seq_len <= max_model_len")
    # --- upper bound ---
    if m.seq_lens_cpu_upper_bound is not None:
        ub = m.seq_lens_cpu_upper_bound.tolist()
        lag = 1 if kind in ("v1_draft_model", "v2_standalone") else 0
        for i in range(n):
            if ql[i] == 0 and ub[i] != 0:
                v.append(f"padded row {i} has upper bound 0")
            if ql[i] > 0 and ub[i] < seq[i] - lag:
                v.append(f"upper_bound[{i}] >= seq_lens[{i}] (-{lag})")
            # V2 clamps the draft upper bound to max_model_len; V1's draft loop
            # does a bare `seq_lens_cpu_upper_bound += 1` and may exceed it.
            if kind.startswith("v2") and ub[i] > mml:
                v.append(f"upper_bound[{i}] <= max_model_len")
    # --- slot mapping vs seq_lens ---
    bt = m.block_table_tensor.tolist()
    sm = m.slot_mapping.tolist()
    for i in real:
        last_seen = None
        for t in range(qs[i], qs[i + 1]):
            if sm[t] == PAD_SLOT:
                last_seen = None if t == qs[i + 1] - 1 else last_seen
                continue
            p = slot_to_pos(sm[t], bt[i], bs, dcp)
            if p is None:
                v.append(f"row {i} slot not in its block table")
                continue
            if p > seq[i] - 1:
                v.append(f"row {i} writes position {p} beyond seq_len {seq[i]}")
            if t == qs[i + 1] - 1 and p != seq[i] - 1:
                v.append(f"row {i} last slot position {p} != seq_len-1 ({seq[i] - 1})")
    for t in range(qs[-1], m.num_actual_tokens):
        if sm[t] != PAD_SLOT:
            v.append("padding tokens map to PAD slot")
            break
    # --- positions (fresh only where vLLM rebuilds them: V2 and V1 target) ---
    fresh_pos = kind.startswith("v2") or st["role"] == "target"
    if fresh_pos and m.positions is not None:
        pos = m.positions.tolist()
        for i in real:
            if pos[qs[i + 1] - 1] != seq[i] - 1:
                v.append(f"row {i} last position != seq_len-1")
    # --- DCP ---
    if dcp is None:
        if m.dcp_local_seq_lens is not None:
            v.append("no dcp_local_seq_lens without DCP")
    else:
        if m.dcp_local_seq_lens is None:
            v.append("dcp_local_seq_lens present under DCP")
        else:
            exp = dcp_local(seq, dcp)
            if m.dcp_local_seq_lens.tolist() != exp:
                v.append("dcp_local_seq_lens == rank share of seq_lens")
    # --- cross-step ---
    if with_chain and k > 0:
        prev = case["steps"][k - 1]
        pm = prev["metadata"]
        pseq = pm.seq_lens.tolist()
        if st["role"] == "draft" and prev["role"] == "draft" and kind in ("v1",) and st["draft_index"] >= 2:
            for i in real:
                ok = seq[i] == min(pseq[i] + 1, mml) or (seq[i] == 1 and sm[qs[i]] == PAD_SLOT)
                if not ok:
                    v.append(f"v1 draft step advances row {i} by exactly one")
        if (
            st["role"] == "draft"
            and prev["role"] == "draft"
            and kind.startswith("v2")
            and st["draft_index"] >= 2
            and kind != "v2_standalone"
            or (kind == "v2_standalone" and st["draft_index"] >= 3)
        ):
            for i in real:
                if seq[i] != min(pseq[i] + 1, mml):
                    v.append(f"v2 draft step advances row {i} by exactly one")
        if st["role"] == "draft" and prev["role"] == "target" and kind in ("v2", "v2_gemma4"):
            s = st["draft_index"] if kind == "v2" else 0
            tql = _qlens(pm)
            for i in real:
                lo = min(pseq[i] - (tql[i] - 1) + s, mml)
                hi = min(pseq[i] + s, mml)
                if not lo <= seq[i] <= hi:
                    v.append(f"first draft row {i} within [T-drafts+s, T+s]")
    return v


def self_check() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate ids"
    n_fault = sum(c["label"] == "fault" for c in CASES)
    n_healthy = sum(c["label"] == "healthy" for c in CASES)
    assert n_fault >= 25 and n_healthy >= 20, (n_fault, n_healthy)
    for c in CASES:
        assert set(c) == {
            "id",
            "label",
            "fault_step",
            "what",
            "source_idiom",
            "steps",
            "block_size",
            "max_model_len",
            "dcp",
        }, c["id"]
        assert c["id"].replace("_", "").isalnum() and c["id"] == c["id"].lower()
        assert c["label"] in ("fault", "healthy")
        steps = c["steps"]
        assert steps and steps[0]["role"] == "target"
        for s in steps:
            assert isinstance(s["metadata"], CommonAttentionMetadata)
            assert s["role"] in ("target", "draft")
            if s["role"] == "target":
                assert s["draft_index"] is None
            else:
                assert isinstance(s["draft_index"], int)
        if c["label"] == "healthy":
            assert c["fault_step"] is None
            for k in range(len(steps)):
                bad = build_violations(c, k)
                assert not bad, (c["id"], k, bad)
        else:
            fs = c["fault_step"]
            assert isinstance(fs, int) and 0 <= fs < len(steps)
            healthy = _META[c["id"]]["healthy"]
            for k in range(fs):
                assert _same(steps[k]["metadata"], healthy[k]["metadata"]), (c["id"], k)
                assert not build_violations(c, k), (c["id"], k)
            assert not _same(steps[fs]["metadata"], healthy[fs]["metadata"])
            bad = build_violations(c, fs)
            assert bad, (c["id"], "fault not visible in any relation at fault_step")
            # only length-valued fields differ from the healthy build
            hm, fm = healthy[fs]["metadata"], steps[fs]["metadata"]
            for f in ("query_start_loc_cpu", "block_table_tensor", "slot_mapping", "positions"):
                x, y = getattr(hm, f), getattr(fm, f)
                assert (x is None and y is None) or torch.equal(x, y), (c["id"], f)
            assert hm.num_reqs == fm.num_reqs and hm.num_actual_tokens == fm.num_actual_tokens
    print(f"self_check ok: {len(CASES)} cases ({n_fault} fault, {n_healthy} healthy)")


if __name__ == "__main__":
    self_check()
