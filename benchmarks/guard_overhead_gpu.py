"""GPU variant of guard_overhead.py, prepared for an H100/H200 (sm90) or a Blackwell (sm100) machine.

NOT RUN YET: no GPU was available where this was written; see docs/benchmarks.md, "On a GPU".

Run it in the serving environment (CUDA torch, vLLM, flashinfer-python 0.7.2.post1, specguard installed):

    python benchmarks/guard_overhead_gpu.py [--pairs 500] [--launches 20] [--json gpu.json]

What it measures, per launch, host-side (the guard adds CPU work before a launch and must add no
device synchronisation):
1. vLLM's `FlashInferMLAImpl.forward_mqa` on CUDA tensors. FlashInfer's trtllm-gen/cute-dsl MLA decode needs
   compute capability 10.x; on sm100 the real kernel runs, on sm90 (H100/H200) a stand-in that makes one
   real CUDA launch takes its place (the table says which).
2. FlashInfer's own `BatchDecodeWithPagedKVCacheWrapper.run` and `BatchPrefillWithPagedKVCacheWrapper.run`
   after a real `plan()`, with real kernels (these run on sm80+).
For each it also counts `aten._local_scalar_dense` (host reads of device values) with and without the
guard and fails if the guard added any. Each run is recorded in benchmarks/results.json (`guard_overhead_gpu/DATE`,
`--no-record` for a trial run), where the docs' figures come from.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import guard_overhead as cpu_bench  # noqa: E402 -- same cases, same stand-in, on the GPU
import results as results_file  # noqa: E402 - benchmarks/results.py, beside this script

# torch (and ScalarReads, on torch) are imported where a launch needs them, so that the tests import summary()
# without torch.


def _compare(name: str, fn: Any, switches: tuple[Any, Any], pairs: int, launches: int) -> dict[str, Any]:
    """Host time per launch with and without the guard (interleaved blocks, synchronised between blocks
    so a full launch queue never stalls the host), and the device reads each adds."""
    import torch

    from specguard.runtime.scalar_reads import ScalarReads

    unguarded, guarded = switches

    def reads() -> int:
        with ScalarReads() as mode:
            fn()
        torch.cuda.synchronize()
        return mode.count

    unguarded()
    base_reads = reads()
    guarded()
    guarded_reads = reads()
    r = cpu_bench.interleaved(
        fn, {"unguarded": unguarded, "guarded": guarded}, pairs, launches, after_block=torch.cuda.synchronize
    )
    return {
        "case": name,
        "unguarded_us": r["unguarded"]["per_launch_us"],
        "added_us": r["guarded"]["added_us"],
        "added_pct": r["guarded"]["added_pct"],
        "scalar_reads_unguarded": base_reads,
        "scalar_reads_guarded": guarded_reads,
    }


def _mla_cases(fm: Any, real: bool, switches: tuple[Any, Any], pairs: int, launches: int) -> list[dict[str, Any]]:
    import torch

    rows = []
    impl_cls = fm.FlashInferMLAImpl  # forward_mqa is looked up per call: the guard replaces it
    for name, (q_lens, causal, dcp) in cpu_bench.CASES.items():
        if dcp > 1:
            continue  # DCP needs a process group for its LSE merge; single-GPU runs cover the local launch
        impl, q, kv, md, layer = cpu_bench._case(fm, q_lens, causal, dcp, device="cuda", dtype=torch.bfloat16)

        def fn(impl=impl, q=q, kv=kv, md=md, layer=layer) -> None:
            impl_cls.forward_mqa(impl, q, kv, md, layer)

        label = f"forward_mqa {name} ({'FlashInfer kernel' if real else 'stand-in launch, sm90'})"
        rows.append(_compare(label, fn, switches, pairs, launches))
    return rows


def _wrapper_cases(switches: tuple[Any, Any], pairs: int, launches: int) -> list[dict[str, Any]]:
    import torch
    from flashinfer.decode import BatchDecodeWithPagedKVCacheWrapper
    from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper

    dev, i32, bf16 = "cuda", torch.int32, torch.bfloat16
    batch, pages_per_req, page, heads, kv_heads, dim = 32, 8, 16, 32, 8, 128
    indptr = torch.arange(0, (batch + 1) * pages_per_req, pages_per_req, dtype=i32)
    indices = torch.arange(batch * pages_per_req, dtype=i32)
    last = torch.full((batch,), page, dtype=i32)
    kv = torch.randn(batch * pages_per_req, 2, page, kv_heads, dim, device=dev, dtype=bf16)
    workspace = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device=dev)
    rows = []

    switches[1]()  # plan() under the guard, so run() finds the layout it records
    decode = BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    decode.plan(indptr, indices, last, heads, kv_heads, dim, page, q_data_type=bf16)
    q_dec = torch.randn(batch, heads, dim, device=dev, dtype=bf16)
    rows.append(
        _compare(
            "BatchDecodeWithPagedKVCacheWrapper.run b=32", lambda: decode.run(q_dec, kv), switches, pairs, launches
        )
    )

    prefill = BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
    qo = torch.arange(0, (batch + 1) * 4, 4, dtype=i32)  # 4 query tokens per request (spec decode verify)
    prefill.plan(qo, indptr, indices, last, heads, kv_heads, dim, page, causal=True, q_data_type=bf16)
    q_pre = torch.randn(batch * 4, heads, dim, device=dev, dtype=bf16)
    rows.append(
        _compare(
            "BatchPrefillWithPagedKVCacheWrapper.run b=32x4", lambda: prefill.run(q_pre, kv), switches, pairs, launches
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=500, help="rounds of interleaved blocks per case")
    parser.add_argument("--launches", type=int, default=20, help="launches per timed block")
    parser.add_argument("--json")
    results_file.add_record_options(parser)
    opts = parser.parse_args(argv)
    import torch

    started = datetime.now(timezone.utc)
    machine = results_file.machine()
    if not torch.cuda.is_available():
        print("guard_overhead_gpu: no CUDA device; run benchmarks/guard_overhead.py on CPU instead")
        return 2
    import flashinfer
    import vllm

    name = torch.cuda.get_device_name()
    from specguard.runtime import install

    real = torch.cuda.get_device_capability()[0] == 10  # FlashInfer's MLA decode kernels need sm100
    fm = cpu_bench._setup(device="cuda", real_kernel=real)
    switches = cpu_bench.guard_states()  # installs the guard once; the cases flip between the two states
    try:
        rows = _mla_cases(fm, real, switches, opts.pairs, opts.launches)
        rows += _wrapper_cases(switches, opts.pairs, opts.launches)
    finally:
        switches[1]()
        install.uninstall()
    sm = "".join(map(str, torch.cuda.get_device_capability()))
    print(
        f"specguard runtime guard overhead on {name} (sm{sm}), vLLM {vllm.__version__}, "
        f"flashinfer {flashinfer.__version__}, torch {torch.__version__}; host time per launch, "
        f"medians of {opts.pairs} rounds of interleaved blocks x {opts.launches} launches"
    )
    print(f"{'case':62} {'unguarded us':>13} {'added us':>9} {'added %':>8} {'syncs +':>8}")
    for r in rows:
        syncs = r["scalar_reads_guarded"] - r["scalar_reads_unguarded"]
        print(f"{r['case']:62} {r['unguarded_us']:13.2f} {r['added_us']:9.2f} {r['added_pct']:8.2f} {syncs:8d}")
    worst_us = max(r["added_us"] for r in rows)
    worst_pct = max(r["added_pct"] for r in rows)
    no_sync = all(r["scalar_reads_guarded"] == r["scalar_reads_unguarded"] for r in rows)
    ok = worst_us <= cpu_bench.TARGET_US and worst_pct <= cpu_bench.TARGET_PCT and no_sync
    print(
        f"worst added: {worst_us:.2f} us, {worst_pct:.2f} %, guard-added device reads: "
        f"{'none' if no_sync else 'SOME'} -> {'met' if ok else 'NOT met'}"
    )
    if opts.json:
        Path(opts.json).write_text(json.dumps({"device": name, "rows": rows, "met": ok}, indent=2))
    if not opts.no_record:
        key = results_file.key("guard_overhead_gpu", started)
        device = {"name": name, "sm": sm, "flashinfer": flashinfer.__version__}
        results_file.record(key, summary(started, vllm.__version__, device, opts, machine, rows), opts.results)
        print(f"recorded {key} in {opts.results}")
    return 0 if ok else 1


def summary(started: datetime, vllm_version: str, device: dict, opts: Any, machine: dict, rows: list[dict]) -> dict:
    """A run as benchmarks/results.json keeps it: the figures the table prints, rounded as it prints them."""
    worst_us, worst_pct = max(r["added_us"] for r in rows), max(r["added_pct"] for r in rows)
    syncs = {r["case"]: r["scalar_reads_guarded"] - r["scalar_reads_unguarded"] for r in rows}
    met = worst_us <= cpu_bench.TARGET_US and worst_pct <= cpu_bench.TARGET_PCT and not any(syncs.values())
    return {
        "script": "benchmarks/guard_overhead_gpu.py",
        "date": started.isoformat(timespec="minutes"),
        "vllm_version": vllm_version,
        "device": device,
        **machine,
        "pairs": opts.pairs,
        "launches": opts.launches,
        "rows": {
            r["case"]: {
                **{k: round(r[k], 2) for k in ("unguarded_us", "added_us", "added_pct")},
                "guard_added_device_reads": syncs[r["case"]],
            }
            for r in rows
        },
        "worst_added_us": round(worst_us, 2),
        "worst_added_pct": round(worst_pct, 2),
        "targets": {"added_us": cpu_bench.TARGET_US, "added_pct": cpu_bench.TARGET_PCT, "guard_added_device_reads": 0},
        "verdict": "met" if met else "NOT met",
    }


if __name__ == "__main__":
    sys.exit(main())
