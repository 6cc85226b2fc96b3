"""Scores a blind set of labelled metadata builds (tests/runtime/blind_lengths_r*/cases.py) against the runtime
guard: each case's builds go, in order, through one out-of-tree attention-metadata builder carrying the case's
KV block size, max_model_len and DCP geometry, with the guard installed in raise mode. A fault is caught when
the first violation is at its labelled build; a violation earlier, or in a healthy case, is a false alarm; a
fault that passes is a miss, listed with the reason the guard printed where it skipped.

Run as a script (`python blind_lengths_score.py DIR`) it prints one JSON line per case and a summary line."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types
from pathlib import Path


def load_cases(folder: Path) -> list[dict]:
    spec = importlib.util.spec_from_file_location(f"blind_cases_{folder.name}", folder / "cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


def score(folder: Path) -> list[dict]:
    os.environ["VLLM_SPECGUARD"] = "1"
    import torch
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.attention.backend import AttentionMetadataBuilder
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    import specguard.runtime as sg
    from specguard.runtime import install
    from specguard.runtime.errors import SpecGuardViolation

    cases = load_cases(folder)
    install.uninstall()
    sg.register()

    class BlindBuilder(AttentionMetadataBuilder):
        """An out-of-tree backend's builder: the attributes vLLM's own builders keep, nothing else."""

        def __init__(self, step: dict) -> None:
            dcp = step.get("dcp") or {"world": 1, "rank": 0, "interleave": 1}
            self.layer_names = ["model.layers.0.self_attn.attn"]
            self.dcp_world_size, self.dcp_rank = dcp["world"], dcp["rank"]
            self.cp_kv_cache_interleave_size = dcp["interleave"]
            self.kv_cache_spec = FullAttentionSpec(
                block_size=step["block_size"], num_kv_heads=1, head_size=64, dtype=torch.bfloat16
            )
            self.vllm_config = types.SimpleNamespace(
                model_config=types.SimpleNamespace(max_model_len=step["max_model_len"]),
                # a GPU deployment capturing FULL graphs: a padded V2 batch may replay one
                compilation_config=types.SimpleNamespace(
                    cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE, cudagraph_capture_sizes=[1, 2, 4, 8, 16, 32]
                ),
            )

        def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
            return None

    results = []
    for case in cases:
        sg.reset_stats()
        # r1 gives the context per build, r2 once per case
        builder = BlindBuilder({k: case["steps"][0].get(k, case.get(k)) for k in ("block_size", "max_model_len", "dcp")})
        flagged, message = None, ""
        for i, step in enumerate(case["steps"]):
            try:
                if step["role"] == "draft":
                    builder.build_for_drafting(step["metadata"], step["draft_index"])
                else:
                    builder.build(0, step["metadata"])
            except SpecGuardViolation as exc:
                flagged, message = i, str(exc)
                break
        want = case["fault_step"] if case["label"] == "fault" else None
        if want is None:
            outcome = "right" if flagged is None else "false alarm"
        elif flagged == want:
            outcome = "caught"
        elif flagged is not None and flagged < want:
            outcome = "false alarm"
        else:
            outcome = "missed"
        stats = sg.stats()
        results.append(
            {
                "id": case["id"],
                "label": case["label"],
                "outcome": outcome,
                "flagged_step": flagged,
                "check": message[len("[specguard ") :].split(" ", 1)[0] if message else None,
                "skips": sorted(stats["skips"]),
                "guard_errors": sorted(stats["guard_errors"]),
            }
        )
    install.uninstall()
    return results


def summary(results: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results:
        key = f"{r['label']}:{r['outcome']}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


if __name__ == "__main__":
    rows = score(Path(sys.argv[1]))
    for row in rows:
        print(json.dumps(row))
    print(json.dumps({"summary": summary(rows)}))
