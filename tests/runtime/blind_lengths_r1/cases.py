"""Blind, labelled test set for a runtime checker of speculative-decoding
attention metadata (stale sequence-length values in draft builds).

Written only from vLLM 0.33.0's own source (see LABELS.md for the reading).
Every case is independent; every build is a real
``vllm.v1.attention.backend.CommonAttentionMetadata`` holding CPU tensors.

Conventions
-----------
* ``steps`` lists the builds in the order the runner makes them.
* ``draft_index`` is the speculator's own step number for that build:
  - V1 (``vllm/v1/spec_decode/llm_base_proposer.py``): 0 is the first pass
    (metadata from ``prepare_inputs_padded`` / ``prepare_inputs``), then
    ``token_index + 1`` for the draft loop, i.e. 1 .. K-1.
  - V2 (``vllm/v1/worker/gpu/spec_decode``): the draft prefill reuses the
    target's metadata object (no build), so the first draft build is
    ``step == 1`` of ``_multi_step_decode``; draft_index == step (1 .. K-1).
  In both runners a draft build with draft_index k >= 1 holds, for a request
  whose target build had length S and n rejected drafts,
  seq_len == S - n + k (subject to max_model_len clamping).
* ``block_size`` is the (rank-local) KV-cache block size; under DCP a block
  table entry covers a virtual block of ``block_size * world`` positions.

Run ``self_check()`` to assert the relations this set was built on.
"""

from __future__ import annotations

import zlib
from dataclasses import fields

import numpy as np
import torch
from vllm.v1.attention.backend import CommonAttentionMetadata

try:  # vLLM's own pure-torch helper (CPU-safe); used to build the values.
    from vllm.v1.attention.backends.utils import (
        get_dcp_local_seq_lens as _vllm_dcp_local_seq_lens,
    )
except Exception:  # pragma: no cover - fall back to the kernel arithmetic
    _vllm_dcp_local_seq_lens = None

PAD = -1  # PADDING_SLOT_ID / PAD_SLOT_ID

V1_IDIOM_LOOP = (
    "vllm/v1/spec_decode/llm_base_proposer.py:propose draft loop + "
    "_update_positions_dependent_metadata (eagle_step_update_slot_mapping_and_metadata)"
)
V1_IDIOM_PADDED = "vllm/v1/spec_decode/llm_base_proposer.py:prepare_inputs_padded + propose draft loop"
V1_IDIOM_NONPADDED = "vllm/v1/spec_decode/llm_base_proposer.py:prepare_inputs + propose draft loop"
V1_IDIOM_TARGET = (
    "vllm/v1/worker/gpu_model_runner.py:_build_attention_metadata (cm_base, "
    "get_dcp_local_seq_lens) + vllm/v1/worker/block_table.py:compute_slot_mapping"
)
V2_IDIOM = (
    "vllm/v1/worker/gpu/spec_decode/speculator.py:DraftModelSpeculator._build_attn_metadata "
    "via target_dependent_ar/speculator.py:_multi_step_decode"
)
V2_IDIOM_DCP = (
    "vllm/v1/worker/gpu/spec_decode/speculator.py:_build_attn_metadata "
    "(prepare_dcp_local_seq_lens from input_buffers.seq_lens) + "
    "vllm/v1/worker/gpu/cp_utils.py"
)


# ---------------------------------------------------------------------------
# Arithmetic read from vLLM
# ---------------------------------------------------------------------------
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _dcp_local(seq_lens: torch.Tensor, world: int, rank: int, interleave: int):
    """get_dcp_local_seq_lens (backends/utils.py) for one rank."""
    s = seq_lens.to(torch.int32)
    if _vllm_dcp_local_seq_lens is not None:
        return _vllm_dcp_local_seq_lens(s, world, rank, interleave).to(torch.int32)
    return _own_dcp_local(s, world, rank, interleave)


def _own_dcp_local(seq_lens: torch.Tensor, world: int, rank: int, interleave: int):
    """My reading of _dcp_local_seq_lens_kernel (worker/gpu/cp_utils.py)."""
    s = seq_lens.to(torch.int64)
    rounds = s // (world * interleave)
    rem = s % (world * interleave)
    rem = torch.clamp(rem - rank * interleave, min=0)
    rem = torch.clamp(rem, max=interleave)
    return (rounds * interleave + rem).to(torch.int32)


def _slot_of(bt_row: torch.Tensor, pos: int, bs: int, dcp: dict | None) -> int:
    """Slot of one position (block_table.py compute_slot_mapping kernels)."""
    if dcp is None:
        return int(bt_row[pos // bs]) * bs + pos % bs
    w, r, il = dcp["world"], dcp["rank"], dcp["interleave"]
    vbs = bs * w
    vb, off = pos // vbs, pos % vbs
    if (off // il) % w != r:
        return PAD
    local = (off // (w * il)) * il + off % il
    return int(bt_row[vb]) * bs + local


def _new_cam(**kw) -> CommonAttentionMetadata:
    return CommonAttentionMetadata(**kw)


# ---------------------------------------------------------------------------
# Requests and block tables
# ---------------------------------------------------------------------------
class Req:
    """One request in a target (verification) step.

    C: tokens already computed; q: tokens scheduled this step (1 + drafts for a
    decode); n_rej: drafts rejected by the target (0 for a prefill chunk);
    prefill: request still in prefill (is_prefilling) this step.
    """

    def __init__(self, C: int, q: int, n_rej: int = 0, prefill: bool = False):
        assert q >= 1 and C >= 0
        if prefill:
            assert n_rej == 0
        else:
            assert 0 <= n_rej <= q - 1
        self.C, self.q, self.n_rej, self.prefill = C, q, n_rej, prefill

    @property
    def S(self) -> int:
        return self.C + self.q


def _alloc_block_table(need_tokens, bs, M, dcp, seed):
    w = 1 if dcp is None else dcp["world"]
    vbs = bs * w
    width = _cdiv(M, vbs)
    nblocks = [_cdiv(max(1, n), vbs) for n in need_tokens]
    rng = np.random.RandomState(seed)
    pool = rng.permutation(np.arange(1, 1 + 4 * sum(nblocks) + 8))
    bt = torch.zeros(len(need_tokens), width, dtype=torch.int32)
    o = 0
    for i, nb in enumerate(nblocks):
        bt[i, :nb] = torch.from_numpy(pool[o : o + nb].astype(np.int32))
        o += nb
    return bt


# ---------------------------------------------------------------------------
# V1 runner: target build + EAGLE / draft-model proposer chain
# ---------------------------------------------------------------------------
def _v1_target(reqs, bt, bs, M, dcp):
    n = len(reqs)
    qlens = torch.tensor([r.q for r in reqs], dtype=torch.int32)
    qsl = torch.zeros(n + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(qlens, 0)
    S = torch.tensor([r.S for r in reqs], dtype=torch.int32)
    pos, slots = [], []
    for i, r in enumerate(reqs):
        for p in range(r.C, r.S):
            pos.append(p)
            slots.append(_slot_of(bt[i], p, bs, dcp))
    md = _new_cam(
        query_start_loc=qsl.clone(),
        query_start_loc_cpu=qsl.clone(),
        seq_lens=S.clone(),
        seq_lens_cpu_upper_bound=S.clone(),
        num_reqs=n,
        num_actual_tokens=int(qsl[-1]),
        max_query_len=int(qlens.max()),
        max_seq_len=int(S.max()),
        block_table_tensor=bt.clone(),
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        causal=True,
        is_prefilling=torch.tensor([r.prefill for r in reqs], dtype=torch.bool),
        positions=torch.tensor(pos, dtype=torch.int64),
    )
    if dcp is not None:
        loc = _dcp_local(S, dcp["world"], dcp["rank"], dcp["interleave"])
        md.dcp_local_seq_lens = loc.clone()
        md.dcp_local_seq_lens_cpu_upper_bound = loc.clone()
    return md


def _v1_iteration(reqs, K, bs, M, bt, padded, kn):
    """Builds of one V1 step: target, draft 0, drafts 1..K-1.

    kn (fault knobs, all default healthy):
      skip_adv {k: rows|None}: kernel's seq_len + 1 missing at loop step k
      double_adv {k: rows|None}: seq_len advanced twice at loop step k
      rewind_mult: multiplier of the pre-loop rewind (padded path)
      rewind_counts: list used for the pre-loop rewind instead of the real one
      np_step0_no_rewind: prepare_inputs keeps the upper bound as seq_lens
      np_loop_rewind: non-padded path also subtracts the rejections in propose
      no_clamp: seq_len not reset/clamped at max_model_len
      freeze_max_seq_len / freeze_upper: not advanced in the loop
      seq_from_target {k}: build k is handed the target's seq_lens
    """
    n = len(reqs)
    tgt = _v1_target(reqs, bt, bs, M, None)
    out = [("target", None, tgt)]
    S = tgt.seq_lens.clone()
    nrej = torch.tensor([r.n_rej for r in reqs], dtype=torch.int32)

    if padded:
        d0 = _new_cam(
            query_start_loc=tgt.query_start_loc.clone(),
            seq_lens=tgt.seq_lens.clone(),
            query_start_loc_cpu=tgt.query_start_loc_cpu.clone(),
            seq_lens_cpu_upper_bound=tgt.seq_lens_cpu_upper_bound.clone(),
            num_reqs=n,
            num_actual_tokens=int(tgt.query_start_loc_cpu[-1]),
            max_query_len=int((tgt.query_start_loc_cpu[1:] - tgt.query_start_loc_cpu[:-1]).max()),
            max_seq_len=tgt.max_seq_len,
            block_table_tensor=tgt.block_table_tensor.clone(),
            slot_mapping=tgt.slot_mapping[: int(tgt.query_start_loc_cpu[-1])].clone(),
            causal=True,
            dcp_local_seq_lens=None,
        )
        out.append(("draft", 0, d0))
        rew = nrej if kn.get("rewind_counts") is None else torch.tensor(kn["rewind_counts"], dtype=torch.int32)
        seq = S - rew * int(kn.get("rewind_mult", 1)) if K > 1 else S.clone()
        upper = tgt.seq_lens_cpu_upper_bound.clone()
        max_seq_len = tgt.max_seq_len
    else:
        new_q = torch.tensor([r.q - r.n_rej for r in reqs], dtype=torch.int32)
        qsl = torch.zeros(n + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(new_q, 0)
        new_seq = tgt.seq_lens_cpu_upper_bound - nrej
        if kn.get("np_step0_no_rewind"):
            new_seq = tgt.seq_lens_cpu_upper_bound.clone()
        old_qsl = tgt.query_start_loc_cpu
        idx = torch.cat([torch.arange(int(old_qsl[i]), int(old_qsl[i]) + int(new_q[i])) for i in range(n)])
        d0 = _new_cam(
            query_start_loc=qsl.clone(),
            seq_lens=new_seq.clone(),
            query_start_loc_cpu=qsl.clone(),
            seq_lens_cpu_upper_bound=new_seq.clone(),
            num_reqs=n,
            num_actual_tokens=int(qsl[-1]),
            max_query_len=int((old_qsl[1:] - old_qsl[:-1]).max()),
            max_seq_len=int(new_seq.max()),
            block_table_tensor=tgt.block_table_tensor.clone(),
            slot_mapping=tgt.slot_mapping[idx].clone(),
            causal=True,
            dcp_local_seq_lens=None,
        )
        out.append(("draft", 0, d0))
        seq = new_seq.clone()
        if kn.get("np_loop_rewind"):
            seq = seq - nrej
        upper = new_seq.clone()
        max_seq_len = int(new_seq.max())

    # position of the last accepted token, from which the loop advances
    pos = (S - nrej - 1).to(torch.int64)
    width = bt.shape[1]
    for k in range(1, K):
        slots = torch.empty(n, dtype=torch.int64)
        for i in range(n):
            new = int(pos[i]) + 1
            exceeds = new >= M
            cp = 0 if exceeds else new
            bn = min(cp // bs, width - 1)
            slots[i] = PAD if exceeds else int(bt[i, bn]) * bs + cp % bs
            inc = 1
            rows = kn.get("skip_adv", {}).get(k, "absent")
            if rows != "absent" and (rows is None or i in rows):
                inc = 0
            rows = kn.get("double_adv", {}).get(k, "absent")
            if rows != "absent" and (rows is None or i in rows):
                inc = 2
            if kn.get("no_clamp"):
                seq[i] = int(seq[i]) + inc
            else:
                s_new = 1 if exceeds else int(seq[i]) + inc
                seq[i] = min(s_new, M)
            pos[i] = cp
        if not kn.get("freeze_max_seq_len"):
            max_seq_len = min(max_seq_len + 1, M)
        if not kn.get("freeze_upper"):
            upper = upper + 1
        handed = S.clone() if k in kn.get("seq_from_target", ()) else seq.clone()
        qsl = torch.arange(n + 1, dtype=torch.int32)
        md = _new_cam(
            query_start_loc=qsl.clone(),
            seq_lens=handed.to(torch.int32),
            query_start_loc_cpu=qsl.clone(),
            seq_lens_cpu_upper_bound=upper.clone(),
            num_reqs=n,
            num_actual_tokens=n,
            max_query_len=1,
            max_seq_len=max_seq_len,
            block_table_tensor=tgt.block_table_tensor.clone(),
            slot_mapping=slots,
            causal=True,
            dcp_local_seq_lens=None,
        )
        out.append(("draft", k, md))
    return out


# ---------------------------------------------------------------------------
# V2 runner: target build + DraftModelSpeculator._build_attn_metadata chain
# ---------------------------------------------------------------------------
def _pad_rows(t: torch.Tensor, rows: int, fill=0):
    if t.shape[0] >= rows:
        return t[:rows].clone()
    extra = torch.full((rows - t.shape[0],) + tuple(t.shape[1:]), fill, dtype=t.dtype)
    return torch.cat([t, extra])


def _v2_target(reqs, bt, bs, M, dcp, target_pad):
    n = len(reqs)
    full = target_pad is not None
    nrp, ntp = target_pad if full else (n, None)
    qlens = [r.q for r in reqs]
    T = sum(qlens)
    num_tokens = ntp if full else T
    qsl = torch.full((nrp + 1,), T, dtype=torch.int32)
    qsl[0] = 0
    qsl[1 : n + 1] = torch.cumsum(torch.tensor(qlens, dtype=torch.int32), 0)
    S = torch.tensor([r.S for r in reqs], dtype=torch.int32)
    pos = torch.zeros(num_tokens, dtype=torch.int64)
    slots = torch.full((num_tokens,), PAD, dtype=torch.int64)
    t = 0
    for i, r in enumerate(reqs):
        for p in range(r.C, r.S):
            pos[t] = p
            slots[t] = _slot_of(bt[i], p, bs, dcp)
            t += 1
    seq = _pad_rows(S, nrp)
    upper = _pad_rows(S, nrp)
    md = _new_cam(
        query_start_loc=qsl.clone(),
        query_start_loc_cpu=qsl.clone(),
        seq_lens=seq.clone(),
        seq_lens_cpu_upper_bound=upper.clone(),
        max_seq_len=int(upper.max()),
        num_reqs=nrp,
        num_actual_tokens=num_tokens,
        max_query_len=max(qlens),
        block_table_tensor=_pad_rows(bt, nrp),
        slot_mapping=slots,
        causal=True,
        positions=pos,
    )
    if dcp is not None:
        loc = _dcp_local(S, dcp["world"], dcp["rank"], dcp["interleave"])
        md.dcp_local_seq_lens = _pad_rows(loc, nrp)
    return md


def _v2_iteration(reqs, K, bs, M, bt, dcp, target_pad, draft_pad, kn):
    """Builds of one V2 step: target, then draft steps 1..K-1.

    kn (fault knobs):
      skip_adv {k: rows|None}: the +1 that precedes build k is missing
        (prepare_decode_inputs for k == 1, update_draft_inputs for k >= 2)
      double_adv {k: rows|None}: that +1 is applied twice
      rewind_mult / rewind_counts: as in V1 (prepare_decode_inputs)
      no_clamp: min(seq_len, max_model_len) not applied
      seq_from_target {k}: build k handed the target's seq_lens
      max_seq_len_from_target / upper_no_step
      dcp_mode: how dcp_local_seq_lens is produced (see _v2_dcp)
    """
    n = len(reqs)
    tgt = _v2_target(reqs, bt, bs, M, dcp, target_pad)
    out = [("target", None, tgt)]
    if K <= 1:
        return out
    S = torch.tensor([r.S for r in reqs], dtype=torch.int32)
    nrej = torch.tensor([r.n_rej for r in reqs], dtype=torch.int32)
    rew = nrej if kn.get("rewind_counts") is None else torch.tensor(kn["rewind_counts"], dtype=torch.int32)
    seq = S - rew * int(kn.get("rewind_mult", 1))  # before prepare_decode's +1
    true_seq = S - nrej
    pos = (S - nrej - 1).to(torch.int64)
    tgt_upper = tgt.seq_lens_cpu_upper_bound[:n].clone()
    draft_max_seq_len = min(int(tgt_upper.max()) + K, M)
    full = draft_pad is not None
    dp = draft_pad if full else n
    num_tokens = dp if full else n
    prev_handed = S.clone()
    for k in range(1, K):
        for i in range(n):
            inc = 1
            rows = kn.get("skip_adv", {}).get(k, "absent")
            if rows != "absent" and (rows is None or i in rows):
                inc = 0
            rows = kn.get("double_adv", {}).get(k, "absent")
            if rows != "absent" and (rows is None or i in rows):
                inc = 2
            seq[i] = int(seq[i]) + inc if kn.get("no_clamp") else min(int(seq[i]) + inc, M)
            true_seq[i] = min(int(true_seq[i]) + 1, M)
            pos[i] = min(int(pos[i]) + 1, M - 1)
        handed = S.clone() if k in kn.get("seq_from_target", ()) else seq.clone()
        qsl = torch.full((dp + 1,), n, dtype=torch.int32)
        qsl[: n + 1] = torch.arange(n + 1, dtype=torch.int32)
        slots = torch.full((num_tokens,), PAD, dtype=torch.int64)
        positions = torch.zeros(num_tokens, dtype=torch.int64)
        for i in range(n):
            slots[i] = _slot_of(bt[i], int(pos[i]), bs, dcp)
            positions[i] = pos[i]
        upper = torch.zeros(dp, dtype=torch.int32)
        up = tgt_upper if kn.get("upper_no_step") else tgt_upper + k
        upper[:n] = torch.clamp(up, max=M)
        max_seq_len = tgt.max_seq_len if kn.get("max_seq_len_from_target") else min(draft_max_seq_len, M)
        md = _new_cam(
            query_start_loc=qsl.clone(),
            query_start_loc_cpu=qsl.clone(),
            seq_lens=_pad_rows(handed.to(torch.int32), dp),
            seq_lens_cpu_upper_bound=upper,
            max_seq_len=max_seq_len,
            num_reqs=dp,
            num_actual_tokens=num_tokens,
            max_query_len=1,
            block_table_tensor=_pad_rows(bt, dp),
            slot_mapping=slots,
            causal=True,
            positions=positions,
            is_prefilling=torch.zeros(dp, dtype=torch.bool),
        )
        if dcp is not None:
            ctx = dict(
                handed=handed,
                prev=prev_handed,
                target=S,
                true=true_seq.clone(),
                upper=up,
                unclamped=S - nrej + k,
            )
            md.dcp_local_seq_lens = _pad_rows(_v2_dcp(ctx, dcp, kn), dp)
        prev_handed = handed.clone()
        out.append(("draft", k, md))
    return out


def _v2_dcp(ctx, dcp, kn):
    w, r, il = dcp["world"], dcp["rank"], dcp["interleave"]
    mode = kn.get("dcp_mode")
    if mode is None:
        return _dcp_local(ctx["handed"], w, r, il)
    if mode == "target":
        return _dcp_local(ctx["target"], w, r, il)
    if mode == "prev":
        return _dcp_local(ctx["prev"], w, r, il)
    if mode == "rank":
        return _dcp_local(ctx["handed"], w, kn["dcp_wrong_rank"], il)
    if mode == "interleave":
        return _dcp_local(ctx["handed"], w, r, kn["dcp_wrong_interleave"])
    if mode == "world":
        return _dcp_local(ctx["handed"], kn["dcp_wrong_world"], r, il)
    if mode == "upper":
        return _dcp_local(ctx["upper"], w, r, il)
    if mode == "floor":
        return (ctx["handed"] // w).to(torch.int32)
    if mode == "true":
        return _dcp_local(ctx["true"], w, r, il)
    if mode == "unclamped":
        return _dcp_local(ctx["unclamped"], w, r, il)
    raise ValueError(mode)


# ---------------------------------------------------------------------------
# Case assembly
# ---------------------------------------------------------------------------
def _next_iter_reqs(reqs, K, rej2):
    """Requests of the next verification step (all decoding 1 + K tokens)."""
    out = []
    for r, n2 in zip(reqs, rej2):
        out.append(Req(C=r.S - r.n_rej, q=1 + K, n_rej=n2))
    return out


def _chain(spec, faulty: bool):
    runner, K, bs, M, dcp = spec["runner"], spec["K"], spec["bs"], spec["M"], spec["dcp"]
    iters = [spec["reqs"]]
    for rej2 in spec.get("more_iters", []):
        iters.append(_next_iter_reqs(iters[-1], K, rej2))
    need = [0] * len(iters[0])
    for reqs in iters:
        for i, r in enumerate(reqs):
            need[i] = max(need[i], min(r.S + K, M))
    bt = _alloc_block_table(need, bs, M, dcp, zlib.crc32(spec["id"].encode()) % (2**31))
    steps = []
    for it, reqs in enumerate(iters):
        kn = spec.get("knobs", {}).get(it, {}) if faulty else {}
        if runner == "v1":
            if spec.get("target_only"):
                builds = [("target", None, _v1_target(reqs, bt, bs, M, dcp))]
            else:
                assert dcp is None
                builds = _v1_iteration(reqs, K, bs, M, bt, spec.get("padded", True), kn)
        else:
            builds = _v2_iteration(reqs, K, bs, M, bt, dcp, spec.get("target_pad"), spec.get("draft_pad"), kn)
        for role, di, md in builds:
            steps.append(
                {
                    "role": role,
                    "draft_index": di,
                    "metadata": md,
                    "block_size": bs,
                    "max_model_len": M,
                    "dcp": None if dcp is None else dict(dcp),
                }
            )
    return steps


def _md_equal(a: CommonAttentionMetadata, b: CommonAttentionMetadata) -> bool:
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                return False
            if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


_PRIVATE: dict[str, dict] = {}


def _make_case(spec):
    faulty = spec["label"] == "fault"
    steps = _chain(spec, faulty)
    fault_step = None
    if faulty:
        healthy = _chain(spec, False)
        assert len(healthy) == len(steps)
        for i, (h, f) in enumerate(zip(healthy, steps)):
            if not _md_equal(h["metadata"], f["metadata"]):
                fault_step = i
                break
        assert fault_step is not None, spec["id"]
        assert fault_step == spec["fault_step"], (spec["id"], fault_step)
        assert steps[fault_step]["role"] == "draft", spec["id"]
        _PRIVATE[spec["id"]] = {"spec": spec, "healthy": healthy}
    else:
        _PRIVATE[spec["id"]] = {"spec": spec, "healthy": steps}
    return {
        "id": spec["id"],
        "label": spec["label"],
        "fault_step": fault_step,
        "what": spec["what"],
        "source_idiom": spec["source_idiom"],
        "steps": steps,
    }


# Request mixes reused by several cases -------------------------------------
def _mix_a():  # three decodes, num_speculative_tokens=3, rejections 0/1/3
    return [Req(40, 4, 0), Req(77, 4, 1), Req(13, 4, 3)]


def _mix_k4():  # K=4
    return [Req(100, 5, 1), Req(31, 5, 4), Req(250, 5, 0), Req(62, 5, 2)]


def _mix_k5_boundary():  # bs=16 block boundaries crossed in the drafts
    return [Req(27, 6, 2), Req(58, 6, 0), Req(10, 6, 5), Req(201, 6, 3)]


def _mix_prefill_k3():  # chunked prefill + decodes + a length-1 request
    return [
        Req(64, 48, 0, prefill=True),
        Req(200, 4, 1),
        Req(0, 1, 0, prefill=True),
        Req(32, 20, 0, prefill=True),
        Req(5, 4, 0),
    ]


def _mix_many_k5():
    return [
        Req(3, 6, 5),
        Req(1000, 6, 0),
        Req(47, 6, 1),
        Req(511, 6, 2),
        Req(90, 6, 4),
        Req(16, 6, 0),
        Req(333, 6, 3),
        Req(128, 6, 1),
    ]


def _dcp(w, r, i):
    return {"world": w, "rank": r, "interleave": i}


SPECS: list[dict] = []


def _add(**spec):
    spec.setdefault("dcp", None)
    spec.setdefault("bs", 16)
    spec.setdefault("M", 4096)
    spec.setdefault("fault_step", None)
    SPECS.append(spec)


# ============================ HEALTHY: V1 ===================================
_add(
    id="h_v1_padded_k3_mixed_rejections",
    label="healthy",
    runner="v1",
    K=3,
    reqs=_mix_a(),
    what="V1 padded drafter chain (K=3): draft 0 reuses target lengths, loop rewinds 0/1/3 rejections then +1 per step.",
    source_idiom=V1_IDIOM_PADDED,
)
_add(
    id="h_v1_padded_k5_block_boundaries",
    label="healthy",
    runner="v1",
    K=5,
    reqs=_mix_k5_boundary(),
    what="V1 padded chain (K=5) whose draft positions cross 16-token block boundaries; slots follow the next block.",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="h_v1_nonpadded_k4",
    label="healthy",
    runner="v1",
    K=4,
    padded=False,
    reqs=_mix_k4(),
    what="V1 disable_padded_drafter_batch: prepare_inputs shortens queries and rewinds seq_lens at draft 0, loop adds 1 per step.",
    source_idiom=V1_IDIOM_NONPADDED,
)
_add(
    id="h_v1_k2_length1_request",
    label="healthy",
    runner="v1",
    K=2,
    reqs=[Req(0, 1, 0, prefill=True), Req(9, 3, 1)],
    what="V1 K=2 chain with a request of total length 1 (one-token prompt) next to a decode.",
    source_idiom=V1_IDIOM_PADDED,
)
_add(
    id="h_v1_clamp_reset_at_max_model_len",
    label="healthy",
    runner="v1",
    K=4,
    M=64,
    reqs=[Req(58, 5, 0), Req(20, 5, 2), Req(55, 5, 4)],
    what="V1 kernel clamp: a draft position reaching max_model_len=64 becomes 0 with PAD slot and seq_len 1, then 2.",
    source_idiom="vllm/v1/spec_decode/utils.py:eagle_step_slot_mapping_metadata_kernel",
)
_add(
    id="h_v1_chunked_prefill_mix_k3",
    label="healthy",
    runner="v1",
    K=3,
    reqs=_mix_prefill_k3(),
    what="V1 chain over a chunked-prefill target batch (partial and final chunks, a length-1 prompt, decodes).",
    source_idiom=V1_IDIOM_PADDED,
)
_add(
    id="h_v1_two_iterations_k3",
    label="healthy",
    runner="v1",
    K=3,
    reqs=[Req(50, 4, 2), Req(120, 4, 0), Req(7, 4, 1)],
    more_iters=[[1, 3, 0]],
    what="Two V1 steps (target, drafts, next target, drafts); second target starts at S - rejected.",
    source_idiom=V1_IDIOM_PADDED,
)
_add(
    id="h_v1_all_rejected_k4",
    label="healthy",
    runner="v1",
    K=4,
    reqs=[Req(30, 5, 4), Req(61, 5, 4), Req(90, 5, 4)],
    what="V1 chain where every draft was rejected: draft 1 seq_len = S - 4 + 1.",
    source_idiom=V1_IDIOM_PADDED,
)
_add(
    id="h_v1_many_reqs_bs32_k5",
    label="healthy",
    runner="v1",
    K=5,
    bs=32,
    reqs=_mix_many_k5(),
    what="V1 chain, 8 requests of very different lengths, block_size 32, K=5.",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="h_v1_nonpadded_two_iterations_k2",
    label="healthy",
    runner="v1",
    K=2,
    padded=False,
    reqs=[Req(14, 3, 2), Req(300, 3, 0)],
    more_iters=[[0, 1]],
    what="V1 non-padded path, K=2, over two steps.",
    source_idiom=V1_IDIOM_NONPADDED,
)
_add(
    id="h_v1_dcp_target_w2_i16_r1",
    label="healthy",
    runner="v1",
    K=3,
    target_only=True,
    dcp=_dcp(2, 1, 16),
    reqs=[Req(64, 48, 0, prefill=True), Req(95, 4, 0), Req(17, 4, 2)],
    what="V1 target build under DCP W=2 I=16 rank 1 with a chunked prefill; local lengths from global lengths.",
    source_idiom=V1_IDIOM_TARGET,
)
_add(
    id="h_v1_dcp_target_w4_i64_r0",
    label="healthy",
    runner="v1",
    K=3,
    target_only=True,
    bs=64,
    dcp=_dcp(4, 0, 64),
    reqs=[Req(300, 4, 0), Req(63, 4, 1), Req(1, 1, 0, prefill=True)],
    what="V1 target build under DCP W=4 I=64 rank 0 (block_size 64).",
    source_idiom=V1_IDIOM_TARGET,
)

# ============================ HEALTHY: V2 ===================================
_add(
    id="h_v2_eager_k3",
    label="healthy",
    runner="v2",
    K=3,
    reqs=_mix_a(),
    what="V2 eager draft decode steps 1..2: seq_len = S - rejected + step, max_seq_len = min(max S + K, max_model_len).",
    source_idiom=V2_IDIOM,
)
_add(
    id="h_v2_full_pad_3_to_4_k4",
    label="healthy",
    runner="v2",
    K=4,
    draft_pad=4,
    reqs=[Req(100, 5, 1), Req(31, 5, 4), Req(250, 5, 0)],
    what="V2 FULL-graph draft builds padded 3->4 requests: padded row has empty query, seq_len 0, PAD slot.",
    source_idiom=V2_IDIOM,
)
_add(
    id="h_v2_full_pad_target_and_draft_5_to_8_k3",
    label="healthy",
    runner="v2",
    K=3,
    target_pad=(8, 32),
    draft_pad=8,
    reqs=[Req(40, 4, 0), Req(77, 4, 1), Req(13, 4, 3), Req(500, 4, 2), Req(64, 4, 0)],
    what="V2 target (FULL, 5->8 reqs, 20->32 tokens) and draft builds both padded.",
    source_idiom=V2_IDIOM,
)
_add(
    id="h_v2_clamp_at_max_model_len_k4",
    label="healthy",
    runner="v2",
    K=4,
    M=128,
    reqs=[Req(121, 5, 0), Req(60, 5, 2), Req(119, 5, 1)],
    what="V2 clamp: positions stop at max_model_len-1 and seq_lens at max_model_len (128) in later steps.",
    source_idiom="vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py:_update_draft_inputs_kernel",
)
_add(
    id="h_v2_chunked_prefill_len1_k3",
    label="healthy",
    runner="v2",
    K=3,
    reqs=_mix_prefill_k3(),
    what="V2 draft steps over a chunked-prefill batch (no rejections on prefill rows) incl. a length-1 request.",
    source_idiom=V2_IDIOM,
)
_add(
    id="h_v2_two_iterations_k3",
    label="healthy",
    runner="v2",
    K=3,
    reqs=[Req(50, 4, 2), Req(120, 4, 0), Req(7, 4, 1)],
    more_iters=[[3, 0, 2]],
    what="Two V2 steps with target builds in between.",
    source_idiom=V2_IDIOM,
)
_add(
    id="h_v2_many_reqs_k5",
    label="healthy",
    runner="v2",
    K=5,
    reqs=_mix_many_k5(),
    what="V2 chain, 8 requests of different lengths, K=5.",
    source_idiom=V2_IDIOM,
)
_add(
    id="h_v2_dcp_w2_i1_r0_k3",
    label="healthy",
    runner="v2",
    K=3,
    dcp=_dcp(2, 0, 1),
    reqs=_mix_a(),
    what="V2 DCP W=2 I=1 rank 0: each draft build recomputes local lengths from its own seq_lens.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="h_v2_dcp_w2_i1_r1_pad_k4",
    label="healthy",
    runner="v2",
    K=4,
    dcp=_dcp(2, 1, 1),
    draft_pad=4,
    reqs=[Req(100, 5, 1), Req(31, 5, 4), Req(250, 5, 0)],
    what="V2 DCP W=2 I=1 rank 1, FULL padded 3->4: padded row local length 0.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="h_v2_dcp_w4_i16_r2_k4",
    label="healthy",
    runner="v2",
    K=4,
    dcp=_dcp(4, 2, 16),
    reqs=[Req(30, 5, 0), Req(45, 5, 3), Req(200, 5, 1), Req(161, 5, 0)],
    what="V2 DCP W=4 I=16 rank 2 (block_size 16), lengths crossing interleave chunks.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="h_v2_dcp_w4_i64_r3_k3",
    label="healthy",
    runner="v2",
    K=3,
    bs=64,
    dcp=_dcp(4, 3, 64),
    reqs=[Req(190, 4, 0), Req(255, 4, 1), Req(700, 4, 2)],
    what="V2 DCP W=4 I=64 rank 3 (block_size 64).",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="h_v2_dcp_w2_i16_r0_clamp_k4",
    label="healthy",
    runner="v2",
    K=4,
    bs=64,
    M=256,
    dcp=_dcp(2, 0, 16),
    reqs=[Req(249, 5, 0), Req(100, 5, 2)],
    what="V2 DCP W=2 I=16 rank 0 with global lengths clamped at max_model_len 256; local from clamped global.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="h_v2_dcp_w4_i1_r1_pad_two_iter_k3",
    label="healthy",
    runner="v2",
    K=3,
    dcp=_dcp(4, 1, 1),
    draft_pad=4,
    reqs=[Req(50, 4, 2), Req(121, 4, 0), Req(8, 4, 1)],
    more_iters=[[0, 3, 1]],
    what="V2 DCP W=4 I=1 rank 1, padded draft builds, two steps with targets between.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="h_v2_dcp_w4_i16_r0_local_unchanged_k5",
    label="healthy",
    runner="v2",
    K=5,
    dcp=_dcp(4, 0, 16),
    reqs=[Req(80, 6, 0), Req(150, 6, 2)],
    what="V2 DCP W=4 I=16 rank 0 where the new tokens land on other ranks, so rank-0 local lengths stay constant while global grows.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="h_v2_dcp_w2_i64_r1_prefill_mix_k3",
    label="healthy",
    runner="v2",
    K=3,
    bs=64,
    dcp=_dcp(2, 1, 64),
    reqs=[Req(128, 60, 0, prefill=True), Req(120, 4, 1), Req(0, 1, 0, prefill=True)],
    what="V2 DCP W=2 I=64 rank 1 with a chunked prefill and a length-1 request.",
    source_idiom=V2_IDIOM_DCP,
)

# ============================ FAULTS: V1 ====================================
_add(
    id="f_v1_step1_not_advanced",
    label="fault",
    runner="v1",
    K=3,
    reqs=_mix_a(),
    knobs={0: {"skip_adv": {1: None}}},
    fault_step=2,
    what="V1 draft 1 seq_lens rewound but not advanced by the token it adds (seq_len == position).",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="f_v1_step2_keeps_step1_lengths",
    label="fault",
    runner="v1",
    K=4,
    reqs=_mix_k4(),
    knobs={0: {"skip_adv": {2: None}}},
    fault_step=3,
    what="V1 draft 2 handed draft 1's seq_lens (advance skipped), off by one from then on.",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="f_v1_step1_target_lengths",
    label="fault",
    runner="v1",
    K=3,
    reqs=[Req(40, 4, 0), Req(77, 4, 2), Req(13, 4, 3)],
    knobs={0: {"seq_from_target": {1}}},
    fault_step=2,
    what="V1 draft 1 handed the target's seq_lens (no rewind, no advance).",
    source_idiom=V1_IDIOM_PADDED,
)
_add(
    id="f_v1_rewind_not_applied",
    label="fault",
    runner="v1",
    K=4,
    reqs=_mix_k4(),
    knobs={0: {"rewind_mult": 0}},
    fault_step=2,
    what="V1 padded path: seq_lens -= num_rejected_tokens skipped, drafts see S + k.",
    source_idiom=V1_IDIOM_PADDED,
)
_add(
    id="f_v1_rewind_applied_twice",
    label="fault",
    runner="v1",
    K=3,
    reqs=_mix_a(),
    knobs={0: {"rewind_mult": 2}},
    fault_step=2,
    what="V1 padded path: rejected tokens subtracted twice from seq_lens.",
    source_idiom=V1_IDIOM_PADDED,
)
_add(
    id="f_v1_step1_advanced_twice",
    label="fault",
    runner="v1",
    K=4,
    reqs=_mix_k4(),
    knobs={0: {"double_adv": {1: None}}},
    fault_step=2,
    what="V1 draft 1 seq_lens advanced twice (+2), one too long for the rest of the chain.",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="f_v1_nonpadded_step0_not_rewound",
    label="fault",
    runner="v1",
    K=3,
    padded=False,
    reqs=_mix_k4(),
    knobs={0: {"np_step0_no_rewind": True}},
    fault_step=1,
    what="V1 prepare_inputs shortens queries by the rejected tokens but keeps the un-rewound upper-bound seq_lens.",
    source_idiom=V1_IDIOM_NONPADDED,
)
_add(
    id="f_v1_nonpadded_rewind_twice",
    label="fault",
    runner="v1",
    K=3,
    padded=False,
    reqs=_mix_k4(),
    knobs={0: {"np_loop_rewind": True}},
    fault_step=2,
    what="V1 non-padded path: propose also subtracts rejections already removed by prepare_inputs.",
    source_idiom=V1_IDIOM_NONPADDED,
)
_add(
    id="f_v1_no_clamp_past_max_model_len",
    label="fault",
    runner="v1",
    K=4,
    M=64,
    reqs=[Req(58, 5, 0), Req(20, 5, 2), Req(55, 5, 4)],
    knobs={0: {"no_clamp": True}},
    fault_step=3,
    what="V1 row whose draft position reaches max_model_len keeps advancing (seq_len 65 > 64) instead of resetting to 1.",
    source_idiom="vllm/v1/spec_decode/utils.py:eagle_step_slot_mapping_metadata_kernel",
)
_add(
    id="f_v1_max_seq_len_not_advanced",
    label="fault",
    runner="v1",
    K=4,
    reqs=[Req(100, 5, 0), Req(31, 5, 4), Req(250, 5, 0)],
    knobs={0: {"freeze_max_seq_len": True}},
    fault_step=2,
    what="V1 draft steps keep the target's max_seq_len while the longest row's seq_len grows past it.",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="f_v1_one_row_stale_step3",
    label="fault",
    runner="v1",
    K=5,
    reqs=_mix_k5_boundary(),
    knobs={0: {"skip_adv": {3: {2}}}},
    fault_step=4,
    what="V1 draft 3: only row 2 keeps draft 2's seq_len; other rows correct.",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="f_v1_second_iter_stale_rewind_counts",
    label="fault",
    runner="v1",
    K=3,
    reqs=[Req(50, 4, 2), Req(120, 4, 0), Req(7, 4, 1)],
    more_iters=[[1, 3, 0]],
    knobs={1: {"rewind_counts": [2, 0, 1]}},
    fault_step=6,
    what="Second V1 step rewinds with the previous step's rejection counts.",
    source_idiom=V1_IDIOM_PADDED,
)
_add(
    id="f_v1_upper_bound_not_advanced",
    label="fault",
    runner="v1",
    K=4,
    reqs=[Req(100, 5, 0), Req(31, 5, 0), Req(250, 5, 1)],
    knobs={0: {"freeze_upper": True}},
    fault_step=2,
    what="V1 draft steps keep seq_lens_cpu_upper_bound at the target value, below the advanced seq_lens.",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="f_v1_length1_request_not_advanced",
    label="fault",
    runner="v1",
    K=2,
    reqs=[Req(0, 1, 0, prefill=True), Req(9, 3, 1)],
    knobs={0: {"skip_adv": {1: {0}}}},
    fault_step=2,
    what="V1 draft 1 keeps seq_len 1 for the one-token request whose draft token sits at position 1.",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="f_v1_prefill_rows_not_advanced",
    label="fault",
    runner="v1",
    K=3,
    reqs=_mix_prefill_k3(),
    knobs={0: {"skip_adv": {1: {0, 3}}}},
    fault_step=2,
    what="V1 draft 1 over a chunked-prefill batch: the two multi-token prefill rows keep their target lengths.",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="f_v1_block_boundary_step_stale",
    label="fault",
    runner="v1",
    K=5,
    reqs=[Req(27, 6, 2), Req(58, 6, 0)],
    knobs={0: {"skip_adv": {3: None}}},
    fault_step=4,
    what="V1 draft 3 (positions 33/66 after crossing a block boundary) not advanced.",
    source_idiom=V1_IDIOM_LOOP,
)
_add(
    id="f_v1_many_reqs_target_lengths_step4",
    label="fault",
    runner="v1",
    K=5,
    bs=32,
    reqs=_mix_many_k5(),
    knobs={0: {"seq_from_target": {4}}},
    fault_step=5,
    what="V1 last draft step (4) handed the target's seq_lens.",
    source_idiom=V1_IDIOM_PADDED,
)

# ============================ FAULTS: V2 ====================================
_add(
    id="f_v2_step1_target_lengths",
    label="fault",
    runner="v2",
    K=3,
    reqs=[Req(40, 4, 0), Req(77, 4, 2), Req(13, 4, 3)],
    knobs={0: {"seq_from_target": {1}}},
    fault_step=1,
    what="V2 draft step 1 handed the target's seq_lens (prepare_decode_inputs result ignored).",
    source_idiom=V2_IDIOM,
)
_add(
    id="f_v2_step2_not_advanced",
    label="fault",
    runner="v2",
    K=4,
    reqs=[Req(100, 5, 1), Req(31, 5, 4), Req(250, 5, 0)],
    knobs={0: {"skip_adv": {2: None}}},
    fault_step=2,
    what="V2 update_draft_inputs does not advance seq_lens before step 2 (positions advanced).",
    source_idiom=V2_IDIOM,
)
_add(
    id="f_v2_rewind_not_applied",
    label="fault",
    runner="v2",
    K=3,
    reqs=_mix_a(),
    knobs={0: {"rewind_mult": 0}},
    fault_step=1,
    what="V2 prepare_decode_inputs ignores num_rejected: seq_len = S + step.",
    source_idiom=V2_IDIOM,
)
_add(
    id="f_v2_rewind_applied_twice",
    label="fault",
    runner="v2",
    K=4,
    reqs=_mix_k4(),
    knobs={0: {"rewind_mult": 2}},
    fault_step=1,
    what="V2 rejections subtracted twice from the draft seq_lens.",
    source_idiom=V2_IDIOM,
)
_add(
    id="f_v2_step1_advanced_twice",
    label="fault",
    runner="v2",
    K=3,
    reqs=_mix_a(),
    knobs={0: {"double_adv": {1: None}}},
    fault_step=1,
    what="V2 draft step 1 seq_lens advanced twice.",
    source_idiom=V2_IDIOM,
)
_add(
    id="f_v2_full_pad_real_rows_stale",
    label="fault",
    runner="v2",
    K=4,
    draft_pad=4,
    reqs=[Req(100, 5, 1), Req(31, 5, 4), Req(250, 5, 0)],
    knobs={0: {"skip_adv": {1: None}}},
    fault_step=1,
    what="V2 FULL padded 3->4: real rows keep S - rejected (not advanced); padded row correct.",
    source_idiom=V2_IDIOM,
)
_add(
    id="f_v2_no_clamp_past_max_model_len",
    label="fault",
    runner="v2",
    K=4,
    M=128,
    reqs=[Req(121, 5, 0), Req(60, 5, 2), Req(119, 5, 1)],
    knobs={0: {"no_clamp": True}},
    fault_step=3,
    what="V2 seq_len of the row at max_model_len keeps growing (129 > 128) while its position is clamped.",
    source_idiom="vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py:_update_draft_inputs_kernel",
)
_add(
    id="f_v2_second_iter_target_lengths",
    label="fault",
    runner="v2",
    K=3,
    reqs=[Req(50, 4, 2), Req(120, 4, 0), Req(7, 4, 1)],
    more_iters=[[3, 0, 2]],
    knobs={1: {"seq_from_target": {1, 2}}},
    fault_step=4,
    what="Second V2 step: both draft builds handed that step's target seq_lens.",
    source_idiom=V2_IDIOM,
)
_add(
    id="f_v2_max_seq_len_from_target",
    label="fault",
    runner="v2",
    K=4,
    reqs=[Req(100, 5, 1), Req(31, 5, 4), Req(250, 5, 0)],
    knobs={0: {"max_seq_len_from_target": True}},
    fault_step=1,
    what="V2 draft builds handed the target's max_seq_len, below the longest draft seq_len.",
    source_idiom=V2_IDIOM,
)
_add(
    id="f_v2_upper_bound_without_step",
    label="fault",
    runner="v2",
    K=3,
    reqs=[Req(40, 4, 0), Req(77, 4, 0), Req(13, 4, 3)],
    knobs={0: {"upper_no_step": True}},
    fault_step=1,
    what="V2 seq_lens_cpu_upper_bound not advanced by step, so it is below seq_lens.",
    source_idiom=V2_IDIOM,
)
_add(
    id="f_v2_many_one_row_stale_step3",
    label="fault",
    runner="v2",
    K=5,
    reqs=_mix_many_k5(),
    knobs={0: {"skip_adv": {3: {5}}}},
    fault_step=3,
    what="V2 draft step 3: only row 5 not advanced.",
    source_idiom=V2_IDIOM,
)

# ============================ FAULTS: DCP (V2) ==============================
_add(
    id="f_dcp_w2_i1_r0_target_local",
    label="fault",
    runner="v2",
    K=3,
    dcp=_dcp(2, 0, 1),
    reqs=_mix_a(),
    knobs={0: {"dcp_mode": "target"}},
    fault_step=1,
    what="DCP W=2 I=1 rank 0: draft builds reuse the target's rank-local lengths.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w4_i16_r1_target_local",
    label="fault",
    runner="v2",
    K=4,
    dcp=_dcp(4, 1, 16),
    reqs=[Req(20, 5, 0), Req(40, 5, 1), Req(100, 5, 0)],
    knobs={0: {"dcp_mode": "target"}},
    fault_step=1,
    what="DCP W=4 I=16 rank 1: draft builds reuse target local lengths although new tokens land on rank 1.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w4_i1_r2_prev_step_global",
    label="fault",
    runner="v2",
    K=4,
    dcp=_dcp(4, 2, 1),
    reqs=[Req(41, 5, 0), Req(98, 5, 1), Req(9, 5, 2)],
    knobs={0: {"dcp_mode": "prev"}},
    fault_step=1,
    what="DCP W=4 I=1 rank 2: local lengths computed from the previous build's global seq_lens.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w2_i16_r1_other_rank",
    label="fault",
    runner="v2",
    K=3,
    dcp=_dcp(2, 1, 16),
    reqs=[Req(20, 4, 0), Req(77, 4, 1), Req(200, 4, 0)],
    knobs={0: {"dcp_mode": "rank", "dcp_wrong_rank": 0}},
    fault_step=1,
    what="DCP W=2 I=16 on rank 1: draft local lengths are rank 0's.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w4_i64_r3_other_rank",
    label="fault",
    runner="v2",
    K=3,
    bs=64,
    dcp=_dcp(4, 3, 64),
    reqs=[Req(190, 4, 0), Req(255, 4, 1), Req(700, 4, 2)],
    knobs={0: {"dcp_mode": "rank", "dcp_wrong_rank": 2}},
    fault_step=1,
    what="DCP W=4 I=64 on rank 3: draft local lengths are rank 2's.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w4_i16_r0_wrong_interleave",
    label="fault",
    runner="v2",
    K=4,
    dcp=_dcp(4, 0, 16),
    reqs=[Req(30, 5, 0), Req(45, 5, 3), Req(200, 5, 1)],
    knobs={0: {"dcp_mode": "interleave", "dcp_wrong_interleave": 1}},
    fault_step=1,
    what="DCP W=4 I=16 rank 0: draft local lengths computed with interleave 1.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w2_i1_r1_wrong_interleave",
    label="fault",
    runner="v2",
    K=3,
    bs=64,
    dcp=_dcp(2, 1, 1),
    reqs=[Req(40, 4, 0), Req(77, 4, 1), Req(13, 4, 3)],
    knobs={0: {"dcp_mode": "interleave", "dcp_wrong_interleave": 64}},
    fault_step=1,
    what="DCP W=2 I=1 rank 1: draft local lengths computed with interleave 64.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w4_i1_r1_from_upper_bound",
    label="fault",
    runner="v2",
    K=3,
    dcp=_dcp(4, 1, 1),
    reqs=[Req(50, 4, 2), Req(121, 4, 3), Req(8, 4, 1)],
    knobs={0: {"dcp_mode": "upper"}},
    fault_step=1,
    what="DCP W=4 I=1 rank 1: local lengths from the optimistic CPU upper bound (rejections not rewound).",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w2_i1_r0_global_stale_local_fresh",
    label="fault",
    runner="v2",
    K=3,
    dcp=_dcp(2, 0, 1),
    reqs=_mix_a(),
    knobs={0: {"skip_adv": {1: None}, "dcp_mode": "true"}},
    fault_step=1,
    what="DCP W=2 I=1 rank 0: global seq_lens not advanced while local lengths are those of the true length.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w4_i16_r2_global_and_local_stale",
    label="fault",
    runner="v2",
    K=4,
    dcp=_dcp(4, 2, 16),
    reqs=[Req(30, 5, 0), Req(45, 5, 3), Req(200, 5, 1), Req(161, 5, 0)],
    knobs={0: {"skip_adv": {2: None}}},
    fault_step=2,
    what="DCP W=4 I=16 rank 2: step 2 global seq_lens not advanced and local lengths recomputed from that stale global.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w2_i1_r0_floor_division",
    label="fault",
    runner="v2",
    K=3,
    dcp=_dcp(2, 0, 1),
    reqs=[Req(40, 4, 0), Req(76, 4, 1), Req(13, 4, 2)],
    knobs={0: {"dcp_mode": "floor"}},
    fault_step=1,
    what="DCP W=2 I=1 rank 0: local lengths computed as seq_len // world (rank 0's remainder token dropped).",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w4_i1_r0_pad_target_local",
    label="fault",
    runner="v2",
    K=4,
    dcp=_dcp(4, 0, 1),
    draft_pad=4,
    reqs=[Req(99, 5, 0), Req(31, 5, 4), Req(250, 5, 0)],
    knobs={0: {"dcp_mode": "target"}},
    fault_step=1,
    what="DCP W=4 I=1 rank 0, FULL padded 3->4: real rows carry the target's local lengths.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w4_i16_r3_wrong_world",
    label="fault",
    runner="v2",
    K=3,
    dcp=_dcp(4, 3, 16),
    reqs=[Req(60, 4, 0), Req(150, 4, 1), Req(250, 4, 0)],
    knobs={0: {"dcp_mode": "world", "dcp_wrong_world": 2}},
    fault_step=1,
    what="DCP W=4 I=16 rank 3: draft local lengths computed for world size 2.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w2_i16_r0_unclamped_local",
    label="fault",
    runner="v2",
    K=4,
    bs=64,
    M=256,
    dcp=_dcp(2, 0, 16),
    reqs=[Req(249, 5, 0), Req(100, 5, 2)],
    knobs={0: {"dcp_mode": "unclamped"}},
    fault_step=3,
    what="DCP W=2 I=16 rank 0: global seq_len clamped at 256 but local length computed from the unclamped 257.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_second_iter_target_local",
    label="fault",
    runner="v2",
    K=3,
    dcp=_dcp(4, 1, 1),
    draft_pad=4,
    reqs=[Req(50, 4, 2), Req(121, 4, 0), Req(8, 4, 1)],
    more_iters=[[0, 0, 1]],
    knobs={1: {"dcp_mode": "target"}},
    fault_step=4,
    what="DCP W=4 I=1 rank 1: in the second step the draft builds reuse that step's target local lengths.",
    source_idiom=V2_IDIOM_DCP,
)
_add(
    id="f_dcp_w2_i64_r1_prev_step_global",
    label="fault",
    runner="v2",
    K=3,
    bs=64,
    dcp=_dcp(2, 1, 64),
    reqs=[Req(128, 80, 0, prefill=True), Req(120, 4, 1), Req(0, 1, 0, prefill=True)],
    knobs={0: {"dcp_mode": "prev"}},
    fault_step=1,
    what="DCP W=2 I=64 rank 1: local lengths from the previous build's global lengths (prefill row grows on rank 1).",
    source_idiom=V2_IDIOM_DCP,
)


CASES: list[dict] = [_make_case(s) for s in SPECS]


# ---------------------------------------------------------------------------
# Self check: relations I believe vLLM keeps, from my own reading
# ---------------------------------------------------------------------------
def _build_violations(step, prev=None, ctx=None):
    """Per-build relations. Returns a list of violation strings."""
    md = step["metadata"]
    bs, M, dcp = step["block_size"], step["max_model_len"], step["dcp"]
    v = []
    n = md.num_reqs
    qc = md.query_start_loc_cpu
    if qc.dtype != torch.int32 or md.seq_lens.dtype != torch.int32:
        v.append("dtype")
    if md.slot_mapping.dtype != torch.int64 or md.block_table_tensor.dtype != torch.int32:
        v.append("dtype2")
    if not torch.equal(md.query_start_loc, qc) or qc.shape[0] != n + 1 or int(qc[0]) != 0:
        v.append("qsl")
    ql = qc[1:] - qc[:-1]
    if (ql < 0).any():
        v.append("qsl monotone")
    if md.seq_lens.shape[0] != n or md.block_table_tensor.shape[0] != n:
        v.append("rows")
    if md.num_actual_tokens < int(qc[-1]) or md.slot_mapping.shape[0] != md.num_actual_tokens:
        v.append("num_actual_tokens/slot len")
    if (md.slot_mapping[int(qc[-1]) :] != PAD).any():
        v.append("padded slots")
    if md.max_query_len != int(ql.max()):
        v.append("max_query_len")
    real = ql > 0
    s = md.seq_lens
    if (s[real] > M).any() or (s[real] < 1).any():
        v.append("seq_len range")
    if (s[real] < ql[real]).any():
        v.append("seq_len < query_len")
    if (s[~real] != 0).any():
        v.append("padded seq_len")
    if md.block_table_tensor[~real].any():
        v.append("padded block table row")
    if md.max_seq_len < int(s.max()) or md.max_seq_len > M:
        v.append("max_seq_len")
    if md.seq_lens_cpu_upper_bound is not None:
        ub = md.seq_lens_cpu_upper_bound
        if ub.shape[0] != n or (s > ub).any():
            v.append("upper bound")
    for i in range(n):
        if not real[i]:
            continue
        a, b = int(qc[i]), int(qc[i + 1])
        L = int(s[i])
        for j, t in enumerate(range(a, b)):
            p = L - (b - a) + j
            vbs = bs * (1 if dcp is None else dcp["world"])
            in_table = p >= 0 and p // vbs < md.block_table_tensor.shape[1]
            exp = _slot_of(md.block_table_tensor[i], p, bs, dcp) if in_table else None
            got = int(md.slot_mapping[t])
            v1_reset = step["role"] == "draft" and L == 1 and b - a == 1 and got == PAD
            if got != exp and not v1_reset:
                v.append(f"slot row {i} tok {t}: got {got} exp {exp} (pos {p})")
            if md.positions is not None and int(md.positions[t]) != p:
                v.append(f"position row {i} tok {t}")
    if dcp is not None:
        loc = md.dcp_local_seq_lens
        if loc is None or loc.dtype != torch.int32 or loc.shape[0] != n:
            v.append("dcp tensor")
        else:
            exp = _own_dcp_local(s, dcp["world"], dcp["rank"], dcp["interleave"])
            exp[~real] = 0
            if not torch.equal(loc, exp):
                v.append("dcp_local_seq_lens")
            if md.dcp_local_seq_lens_cpu_upper_bound is not None and not torch.equal(
                md.dcp_local_seq_lens_cpu_upper_bound, loc
            ):
                v.append("dcp upper")
    elif md.dcp_local_seq_lens is not None:
        v.append("dcp without dcp")
    # chain relation between consecutive decode draft builds
    if (
        prev is not None
        and step["role"] == "draft"
        and prev["role"] == "draft"
        and step["draft_index"] == prev["draft_index"] + 1
        and prev["draft_index"] >= 1
    ):
        ps = prev["metadata"].seq_lens
        pr = (prev["metadata"].query_start_loc_cpu[1:] - prev["metadata"].query_start_loc_cpu[:-1]) > 0
        for i in range(n):
            if not real[i] or i >= ps.shape[0] or not pr[i]:
                continue
            nxt = int(ps[i]) + 1
            if ctx == "v1":
                new_pos = _pos_from_v1(prev, i) + 1
                exp = 1 if new_pos >= M else min(nxt, M)
            else:
                exp = min(nxt, M)
            if int(s[i]) != exp:
                v.append(f"chain row {i}: {int(s[i])} != {exp}")
    return v


def _pos_from_v1(step, i):
    """Position written by a V1 decode draft build for row i (seq_len - 1)."""
    return int(step["metadata"].seq_lens[i]) - 1


def _expected_draft_seq(spec, it_reqs, k, runner, M):
    out = []
    for r in it_reqs:
        if runner == "v2":
            out.append(min(r.S - r.n_rej + k, M))
        else:
            seq, pos = r.S - r.n_rej, r.S - r.n_rej - 1
            for _ in range(k):
                new = pos + 1
                if new >= M:
                    pos, seq = 0, 1
                else:
                    pos, seq = new, min(seq + 1, M)
            out.append(seq)
    return out


def self_check(verbose: bool = False) -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate ids"
    nf = sum(c["label"] == "fault" for c in CASES)
    nh = sum(c["label"] == "healthy" for c in CASES)
    assert nf >= 30 and nh >= 20, (nf, nh)
    for c in CASES:
        priv = _PRIVATE[c["id"]]
        spec = priv["spec"]
        runner = spec["runner"]
        # 1) own DCP formula == vLLM's helper
        for st in c["steps"]:
            d = st["dcp"]
            if d is not None:
                s = st["metadata"].seq_lens
                assert torch.equal(
                    _own_dcp_local(s, d["world"], d["rank"], d["interleave"]),
                    _dcp_local(s, d["world"], d["rank"], d["interleave"]),
                )
            assert isinstance(st["metadata"], CommonAttentionMetadata)
        # 2) per-build relations on healthy builds
        healthy = priv["healthy"]
        for i, st in enumerate(healthy):
            prev = healthy[i - 1] if i else None
            viol = _build_violations(st, prev, runner)
            assert not viol, (c["id"], i, viol[:5])
        # 3) exact draft lengths: S - rejected + k (with the runner's clamp)
        iters = [spec["reqs"]]
        for rej2 in spec.get("more_iters", []):
            iters.append(_next_iter_reqs(iters[-1], spec["K"], rej2))
        it = -1
        for st in healthy:
            if st["role"] == "target":
                it += 1
                S = torch.tensor([r.S for r in iters[it]], dtype=torch.int32)
                n = len(iters[it])
                assert torch.equal(st["metadata"].seq_lens[:n], S)
                continue
            k = st["draft_index"]
            n = len(iters[it])
            got = st["metadata"].seq_lens[:n].tolist()
            if k == 0:
                if spec.get("padded", True):
                    exp = [r.S for r in iters[it]]
                else:
                    exp = [r.S - r.n_rej for r in iters[it]]
            else:
                exp = _expected_draft_seq(spec, iters[it], k, runner, spec["M"])
            assert got == exp, (c["id"], k, got, exp)
        # 4) faults: healthy prefix, and the fault build breaks a relation
        if c["label"] == "fault":
            fs = c["fault_step"]
            for i in range(fs):
                assert _md_equal(c["steps"][i]["metadata"], healthy[i]["metadata"])
                prev = c["steps"][i - 1] if i else None
                assert not _build_violations(c["steps"][i], prev, runner), (c["id"], i)
            prev = c["steps"][fs - 1] if fs else None
            viol = _build_violations(c["steps"][fs], prev, runner)
            assert viol, ("fault not visible to relations", c["id"])
            if verbose:
                print(f"{c['id']:45s} step {fs}: {viol[:2]}")
        else:
            assert c["fault_step"] is None
    if verbose:
        print(f"self_check ok: {nf} fault, {nh} healthy")


if __name__ == "__main__":
    self_check(verbose=True)
