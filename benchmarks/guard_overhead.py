"""Per-launch cost of the runtime guard on the real vLLM `FlashInferMLAImpl.forward_mqa` path, on CPU.

Runs vLLM's own forward_mqa (from the installed vLLM, 0.33.0 in the test venv) on CPU tensors. It calls
FlashInfer's real MLA decode entry point; the implementation function behind that entry (device checks
and the launch: a real one needs a Blackwell GPU) is a stand-in that returns a preallocated output, and
the CUDA workspace allocation is a CPU buffer. Three states are
timed in short interleaved blocks: unguarded; the guard's two call sites intercepted by pass-through
wrappers that check nothing (the floor any Python-level guard pays); and the guard as VLLM_SPECGUARD=1
installs it (G1/G3 at forward_mqa, G2 at the kernel entry). Each block is compared with its neighbours,
so the machine's speed drifting between blocks cancels out; the script prints the added microseconds
and percent per launch.

    python benchmarks/guard_overhead.py [--pairs 1500] [--launches 20] [--json out.json] [--no-record]

Targets (issue 3): at most 5 us and at most 5 % added per launch. Each run is recorded in
benchmarks/results.json (`guard_overhead/DATE`), where the docs' figures come from.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import types
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import results as results_file  # benchmarks/results.py, beside this script

# torch is imported where a launch needs it, so that the tests import summary() without it.
TARGET_US, TARGET_PCT = 5.0, 5.0
STAND_IN_AT = ""  # where _setup put the stand-in kernel, for the table's header
HEADS, KV_LORA, ROPE = 16, 512, 64
CASES = {  # name: (query tokens per request, causal, dcp_world_size)
    "decode b=32 causal": ([1] * 32, True, 1),
    "spec-decode b=32 ragged causal": ([1, 2, 3, 4] * 8, True, 1),
    "dspark b=16x4 non-causal": ([4] * 16, False, 1),
    "dcp=2 b=32 causal": ([1] * 32, True, 2),
    "dcp=2 dspark b=16x4 non-causal": ([4] * 16, False, 2),
}


def _setup(device: str = "cpu", real_kernel: bool = False) -> Any:
    """Put a stand-in where FlashInfer's MLA decode does its work, and a workspace on `device` (the GPU
    variant keeps vLLM's own workspace and, with `real_kernel`, FlashInfer's kernel).

    vLLM calls FlashInfer's real public entry point, as in serving (its API-logging decorator and its
    forwarding of all its parameters run); only the implementation function behind it, which validates
    against the CUDA device and launches the kernel, is the stand-in. That function is found by inspection, as
    the runtime tests find it (FlashInfer renames it: 0.7.4 did); where none is found the stand-in takes the
    entry's place, with its signature, and the table's header says so."""
    global STAND_IN_AT
    import torch
    from vllm.v1.attention.backends.mla import flashinfer_mla as fm

    if real_kernel:
        return fm

    outputs: dict[tuple, torch.Tensor] = {}

    def stand_in(**kwargs: Any) -> Any:
        q = kwargs["query"]
        key = tuple(q.shape)
        out = outputs.get(key)
        if out is None:
            out = outputs[key] = torch.zeros(*q.shape[:-1], kwargs["kv_lora_rank"], device=q.device)
        if q.is_cuda:
            out.zero_()  # one real launch, so the GPU variant pays a launch like the kernel would
        return (out, out[..., 0]) if kwargs.get("return_lse") else out

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime"))
    from sg_runtime_helpers import place_mla_stand_in  # noqa: PLC0415 -- the runtime tests' own placement

    placed = place_mla_stand_in(stand_in)
    STAND_IN_AT = (
        f"behind FlashInfer's MLA entry, in place of {placed}"
        if placed
        else "at the MLA entry vLLM calls, FlashInfer's own entry skipped (no private function found behind it)"
    )
    if device == "cpu":
        workspace = torch.zeros(64, dtype=torch.int8)
        fm._get_workspace_buffer = lambda return_lse: workspace
    return fm


def _case(fm: Any, q_lens: list[int], causal: bool, dcp: int, device: str = "cpu", dtype: Any = None) -> tuple:
    import torch

    impl = types.SimpleNamespace(
        dcp_world_size=dcp,
        dcp_rank=0,
        cp_kv_cache_interleave_size=1,
        scale=0.1,
        bmm1_scale=None,
        bmm2_scale=None,
        kv_cache_dtype="auto",
        need_to_return_lse_for_decode=dcp > 1,
        qk_nope_head_dim=128,
        kv_lora_rank=KV_LORA,
        qk_rope_head_dim=ROPE,
        _mla_counter_bytes=None,
        _mla_counter_max_batch=256,
    )
    impl._flattened_decode_metadata = types.MethodType(fm.FlashInferMLAImpl._flattened_decode_metadata, impl)
    n, tokens = len(q_lens), sum(q_lens)
    qsl = torch.tensor([0, *[sum(q_lens[: i + 1]) for i in range(n)]], dtype=torch.int32, device=device)
    decode = fm.FlashInferMLADecodeMetadata(
        block_table=torch.zeros(n, 64, dtype=torch.int32, device=device),
        seq_lens=torch.full((n,), 900, dtype=torch.int32, device=device),
        dcp_tot_seq_lens=torch.full((n,), 1800, dtype=torch.int32, device=device) if dcp > 1 else None,
        query_start_loc=qsl,
        max_query_len=max(q_lens),
    )
    md = fm.FlashInferMLAMetadata(
        num_reqs=n,
        max_query_len=max(q_lens),
        max_seq_len=900,
        num_actual_tokens=tokens,
        query_start_loc=qsl,
        slot_mapping=torch.zeros(tokens, dtype=torch.int64, device=device),
        num_decodes=n,
        num_decode_tokens=tokens,
        num_prefills=0,
        causal=causal,
        decode=decode,
    )
    # What the FlashInfer MLA build records on its metadata under the guard (G0's build hook): whether the
    # decode query lengths allow the uniform launch. Unguarded forward_mqa never reads it.
    from specguard.runtime.adapt_mla import record_decode_layout

    record_decode_layout(None, types.SimpleNamespace(query_start_loc_cpu=qsl.cpu()), md)
    layer = types.SimpleNamespace(
        layer_name="model.layers.0.self_attn.attn",
        non_causal_multi_token_decode=not causal,
        _q_scale_float=1.0,
        _k_scale_float=1.0,
    )
    dtype = dtype or torch.float32
    q = torch.randn(tokens, HEADS, KV_LORA + ROPE, device=device, dtype=dtype)
    # block size 16 on CPU keeps vLLM off the SM-count query; the GPU variant passes 32 or 64 for trtllm-gen
    kv = torch.zeros(64, 16 if device == "cpu" else 64, KV_LORA + ROPE, device=device, dtype=dtype)
    return impl, q, kv, md, layer


Switch = Any  # a zero-argument callable that puts one state's functions in place


def guard_states() -> tuple[Switch, Switch]:
    """(unguarded, guarded) switches over every attribute the guard patches, so a benchmark can flip
    between the two with a few setattr calls instead of installing and uninstalling around each block."""
    from specguard.runtime import install
    from specguard.runtime.patching import raw_attr

    patches = list(install.install("raise").patcher.patches)
    guarded = [(p.owner, p.name, raw_attr(p.owner, p.name)) for p in patches]
    original = [(p.owner, p.name, p.raw_original) for p in patches]
    return _switch(original), _switch(guarded)


def _switch(assignments: list[tuple[Any, str, Any]]) -> Switch:
    def apply() -> None:
        for owner, name, value in assignments:
            setattr(owner, name, value)

    return apply


def passthrough_state(fm: Any, unguarded: Switch) -> Switch:
    """The guard's two MLA call sites intercepted the way the guard intercepts them (forward_mqa by a
    function with its leading parameters, the kernel entry by a signature mirror), checking nothing: the
    cost of the interception alone, below which no check written in Python can go."""
    from specguard.runtime.mirror import mirror

    unguarded()
    forward, kernel = fm.FlashInferMLAImpl.__dict__["forward_mqa"], fm.trtllm_batch_decode_with_kv_cache_mla

    def forward_mqa(self: Any, q: Any, kv: Any, md: Any, layer: Any, *args: Any, **kwargs: Any) -> Any:
        return forward(self, q, kv, md, layer, *args, **kwargs)

    def nothing() -> None:
        return None

    return _switch(
        [
            (fm.FlashInferMLAImpl, "forward_mqa", forward_mqa),
            (fm, "trtllm_batch_decode_with_kv_cache_mla", mirror(kernel, nothing, {})),
        ]
    )


def _block_ns(fn: Any, launches: int) -> int:
    start = time.perf_counter_ns()
    for _ in range(launches):
        fn()
    return time.perf_counter_ns() - start


def interleaved(
    fn: Any, states: dict[str, Switch], pairs: int, launches: int, after_block: Any = None
) -> dict[str, Any]:
    """Time `fn` in blocks of `launches`, visiting every state once per round in a rotating order
    (`after_block`, untimed, runs after each block: the GPU variant synchronises there). Returns, per
    state, the median per-launch time and the median per-round difference from the first state
    (absolute and relative): neighbouring blocks share the machine's speed of the moment."""
    names = list(states)
    for name in names:  # warm every state (first calls allocate, log, fill caches)
        states[name]()
        _block_ns(fn, 50)
    samples: dict[str, list[int]] = {name: [] for name in names}
    gc.disable()
    try:
        for i in range(pairs):
            k = i % len(names)
            for name in names[k:] + names[:k]:
                states[name]()
                samples[name].append(_block_ns(fn, launches))
                if after_block is not None:
                    after_block()
    finally:
        gc.enable()
    base = samples[names[0]]
    out: dict[str, Any] = {}
    for name in names:
        diffs = [s - b for s, b in zip(samples[name], base, strict=True)]
        ratios = [s / b - 1.0 for s, b in zip(samples[name], base, strict=True)]
        out[name] = {
            "per_launch_us": statistics.median(samples[name]) / launches / 1e3,
            "added_us": statistics.median(diffs) / launches / 1e3,
            "added_pct": 100.0 * statistics.median(ratios),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1500, help="rounds of interleaved blocks per case")
    parser.add_argument("--launches", type=int, default=20, help="launches per timed block")
    parser.add_argument("--json", help="also write the results here")
    results_file.add_record_options(parser)
    opts = parser.parse_args(argv)

    import torch

    started = datetime.now(timezone.utc)
    machine = results_file.machine()
    torch.set_num_threads(1)
    fm = _setup()
    import vllm

    from specguard.runtime import install, stats
    from specguard.runtime.policy import POLICY

    unguarded, guarded = guard_states()
    states = {"unguarded": unguarded, "pass-through": passthrough_state(fm, unguarded), "guarded": guarded}
    rows = []
    cls = fm.FlashInferMLAImpl
    try:
        for name, (q_lens, causal, dcp) in CASES.items():
            impl, q, kv, md, layer = _case(fm, q_lens, causal, dcp)

            def launch(impl: Any = impl, q: Any = q, kv: Any = kv, md: Any = md, layer: Any = layer) -> None:
                cls.forward_mqa(impl, q, kv, md, layer)  # looked up per call: the states swap it

            r = interleaved(launch, states, opts.pairs, opts.launches)
            rows.append(
                {
                    "case": name,
                    "unguarded_us": r["unguarded"]["per_launch_us"],
                    "floor_us": r["pass-through"]["added_us"],
                    "floor_pct": r["pass-through"]["added_pct"],
                    "added_us": r["guarded"]["added_us"],
                    "added_pct": r["guarded"]["added_pct"],
                }
            )
    finally:
        guarded()
        install.uninstall()
    s = stats()
    assert not s["violations"] and not s["guard_errors"] and not s["skips"], s  # every launch really checked
    POLICY.reset_counters()

    print(
        f"specguard runtime guard overhead, vLLM {vllm.__version__} FlashInferMLAImpl.forward_mqa on CPU "
        f"(stand-in kernel {STAND_IN_AT}), torch {torch.__version__}; {opts.pairs} rounds of interleaved blocks x "
        f"{opts.launches} launches; medians of per-round differences"
    )
    print(f"{'case':34} {'unguarded us':>13} {'added us':>9} {'added %':>8} {'floor us':>9} {'floor %':>8}")
    for r in rows:
        print(
            f"{r['case']:34} {r['unguarded_us']:13.2f} {r['added_us']:9.2f} {r['added_pct']:8.2f} "
            f"{r['floor_us']:9.2f} {r['floor_pct']:8.2f}"
        )
    worst_us = max(r["added_us"] for r in rows)
    worst_pct = max(r["added_pct"] for r in rows)
    us_ok, pct_ok = worst_us <= TARGET_US, worst_pct <= TARGET_PCT
    print(
        f"worst added: {worst_us:.2f} us ({'met' if us_ok else 'NOT met'}: <= 5 us), "
        f"{worst_pct:.2f} % ({'met' if pct_ok else 'NOT met'}: <= 5 %); floor = two pass-through "
        f"wrappers that check nothing, at most {max(r['floor_pct'] for r in rows):.2f} %"
    )
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump(
                {"rows": rows, "worst_added_us": worst_us, "worst_added_pct": worst_pct, "met": us_ok and pct_ok},
                fh,
                indent=2,
            )
    if not opts.no_record:
        key = results_file.key("guard_overhead", started)
        results_file.record(key, summary(started, vllm.__version__, opts, machine, rows), opts.results)
        print(f"recorded {key} in {opts.results}")
    return 0 if us_ok and pct_ok else 1


def summary(started: datetime, vllm_version: str, opts: Any, machine: dict, rows: list[dict]) -> dict:
    """A run as benchmarks/results.json keeps it: the figures the table prints, rounded as it prints them."""
    worst_us, worst_pct = max(r["added_us"] for r in rows), max(r["added_pct"] for r in rows)
    return {
        "script": "benchmarks/guard_overhead.py",
        "date": started.isoformat(timespec="minutes"),
        "vllm_version": vllm_version,
        **machine,
        "pairs": opts.pairs,
        "launches": opts.launches,
        "rows": {
            r["case"]: {k: round(r[k], 2) for k in ("unguarded_us", "added_us", "added_pct", "floor_us", "floor_pct")}
            for r in rows
        },
        "worst_added_us": round(worst_us, 2),
        "worst_added_pct": round(worst_pct, 2),
        "worst_floor_pct": round(max(r["floor_pct"] for r in rows), 2),
        "targets": {"added_us": TARGET_US, "added_pct": TARGET_PCT},
        "verdict": "met" if worst_us <= TARGET_US and worst_pct <= TARGET_PCT else "NOT met",
    }


if __name__ == "__main__":
    sys.exit(main())
