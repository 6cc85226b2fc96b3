"""The differential test of issue 12: every vLLM and FlashInfer function the guard wraps, called on inputs
the guard finds healthy, returns the same values and raises the same exception types with the guard off,
in warn mode and in raise mode. Inputs include some vLLM itself rejects: its own errors must come through
unchanged. (The speculator helpers and the DP dispatch of G4 are compared the same way on both vLLM
releases in test_seed1_draft_tokens.py; vLLM's grouping decisions in test_kv_group_merge.py; its compile
cache key in test_good_citizen.py.)"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
from sg_runtime_helpers import common_metadata, paged_wrapper

from specguard.runtime import install, stats

MODES = ("off", "warn", "raise")


def normal(value: Any) -> Any:
    """A comparable picture of a result: tensors by dtype, shape and values; dataclasses by their fields."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, {f.name: normal(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normal(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    return type(value).__name__


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "returned", normal(call())
    except Exception as exc:  # noqa: BLE001 -- the exception type is what is compared
        return "raised", type(exc).__name__


def differential(guard: Callable[[str], Any], calls: dict[str, Callable[[], Any]]) -> dict[str, tuple[str, Any]]:
    """Each call's outcome with the guard off, then installed in warn and raise mode; they must agree."""
    results: dict[str, dict[str, tuple[str, Any]]] = {}
    for mode in MODES:
        if mode != "off":
            guard(mode)
        results[mode] = {name: outcome(call) for name, call in calls.items()}
        install.uninstall()
    for mode in ("warn", "raise"):
        for name in calls:
            assert results[mode][name] == results["off"][name], (mode, name)
    return results["off"]


def test_metadata_builders(guard, cpu_builder, mla) -> None:
    from vllm.v1.worker.gpu import attn_utils
    from vllm.v1.worker.utils import AttentionGroup

    def v2_runner_build() -> Any:
        builder = cpu_builder()
        group = AttentionGroup(None, list(builder.layer_names), builder.kv_cache_spec, 0, metadata_builders=[builder])
        qsl = torch.tensor([0, 3, 4, 8], dtype=torch.int32)
        return attn_utils.build_attn_metadata(
            attn_groups=[[group]],
            num_reqs=3,
            num_tokens=8,
            query_start_loc_gpu=qsl.clone(),
            query_start_loc_cpu=qsl,
            max_query_len=4,
            seq_lens=torch.tensor([9, 10, 12], dtype=torch.int32),
            max_seq_len=12,
            block_tables=[torch.arange(24, dtype=torch.int32).view(3, 8)],
            slot_mappings=torch.arange(64, dtype=torch.int64).view(1, 64),
            kv_cache_config=types.SimpleNamespace(kv_cache_groups=[types.SimpleNamespace(kv_cache_spec=None)]),
        )

    outcomes = differential(
        guard,
        {
            "CPU build": lambda: cpu_builder().build(0, common_metadata([3, 1, 4])),
            "CPU build_for_drafting": lambda: cpu_builder().build_for_drafting(common_metadata([1, 1, 1]), 1),
            "CPU build_for_cudagraph_capture": lambda: cpu_builder().build_for_cudagraph_capture(
                common_metadata([1, 1], num_actual_tokens=4)
            ),
            "V2 build_attn_metadata": v2_runner_build,
            "MLA build causal ragged": lambda: mla.metadata([3, 1, 4, 2]),
            "MLA build DCP": lambda: mla.metadata([4, 4, 4], dcp=True),
            "MLA build non-causal": lambda: mla.metadata([4, 4], causal=False),
            # vLLM's own refusal (a non-causal block must be uniform) comes through unchanged
            "MLA build non-causal ragged": lambda: mla.metadata([4, 2], causal=False),
        },
    )
    assert outcomes["MLA build non-causal ragged"] == ("raised", "ValueError")
    assert all(kind == "returned" for name, (kind, _) in outcomes.items() if "ragged" not in name)


@pytest.mark.parametrize("case", ["causal", "spec-ragged", "non-causal", "dcp", "dcp-non-causal", "dcp-uniform-mtp"])
def test_forward_mqa_and_the_kernel_entry(guard, mla, case) -> None:
    q_lens, causal, dcp = {
        "causal": ([1, 1, 1, 1], True, 1),
        "spec-ragged": ([3, 1, 4, 2], True, 1),
        "non-causal": ([4, 4, 4], False, 1),
        "dcp": ([1, 1, 1], True, 2),
        "dcp-non-causal": ([4, 4], False, 2),
        "dcp-uniform-mtp": ([4, 4, 4], True, 2),
    }[case]
    torch.manual_seed(0)
    q = mla.query(sum(q_lens))

    def launch(kv_cache: Any = None) -> Any:
        impl = mla.impl(dcp_world_size=dcp, dcp_rank=dcp - 1)
        md = mla.metadata(q_lens, causal=causal, dcp=dcp > 1)
        cache = mla.kv_cache() if kv_cache is None else kv_cache
        out = mla.fm.FlashInferMLAImpl.forward_mqa(impl, q, cache, md, mla.layer(non_causal=not causal))
        launched = mla.calls.pop()
        return out, {k: v for k, v in launched.items() if k != "workspace_buffer"}

    outcomes = differential(
        guard,
        {
            "forward_mqa": launch,
            # vLLM's own assertion (an empty KV cache) is still an AssertionError, from vLLM
            "forward_mqa empty cache": lambda: launch(torch.zeros(0, 16, mla.KV_LORA + mla.ROPE)),
        },
    )
    assert outcomes["forward_mqa"][0] == "returned"
    assert outcomes["forward_mqa empty cache"] == ("raised", "AssertionError")


def test_flashinfer_paged_wrappers(guard, calls) -> None:
    from flashinfer.decode import BatchDecodeWithPagedKVCacheWrapper as Decode
    from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper as Prefill

    i32 = torch.int32

    def prefill() -> Any:
        calls.clear()
        w = paged_wrapper(Prefill)
        qo = torch.tensor([0, 4, 8, 12], dtype=i32)
        kv = torch.tensor([0, 1, 2, 3], dtype=i32)
        Prefill.begin_forward(w, qo, kv, torch.arange(3, dtype=i32), torch.full((3,), 5, dtype=i32), 4, 4, 64, 16)
        Prefill.run(w, torch.randn(12, 4, 64), torch.zeros(4, 16, 4, 64))
        Prefill.run_return_lse(w, torch.randn(12, 4, 64), torch.zeros(4, 16, 4, 64))
        return list(calls)

    def decode() -> Any:
        calls.clear()
        w = paged_wrapper(Decode)
        indptr = torch.tensor([0, 1, 2, 3, 4], dtype=i32)
        Decode.plan(w, indptr, torch.arange(4, dtype=i32), torch.ones(4, dtype=i32), 4, 4, 64, 16, q_len_per_req=2)
        Decode.run(w, torch.randn(8, 4, 64), torch.zeros(4, 16, 4, 64))
        return list(calls)

    differential(guard, {"prefill": prefill, "decode": decode})


def test_attention_spec_merges(guard) -> None:
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec

    mla = functools.partial(MLAAttentionSpec, block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16)
    full = functools.partial(FullAttentionSpec, block_size=16, num_kv_heads=8, head_size=64, dtype=torch.bfloat16)
    outcomes = differential(
        guard,
        {
            "MLA uniform": lambda: MLAAttentionSpec.merge([mla(), mla()]),
            "MLA mixed non-causal decode": lambda: MLAAttentionSpec.merge(
                [mla(), mla(non_causal_multi_token_decode=True)]
            ),
            "MLA from a generator": lambda: MLAAttentionSpec.merge(mla() for _ in range(3)),
            "Full non_causal": lambda: FullAttentionSpec.merge([full(), full(non_causal=True)]),
            # vLLM's own "cannot merge" answers: AssertionError and ValueError, from vLLM
            "MLA with Full": lambda: MLAAttentionSpec.merge([mla(), full()]),
            "MLA cache dtypes": lambda: MLAAttentionSpec.merge([mla(cache_dtype_str="fp8"), mla()]),
            "Full windows": lambda: FullAttentionSpec.merge([full(sliding_window=8), full(sliding_window=16)]),
        },
    )
    assert outcomes["MLA with Full"] == outcomes["MLA cache dtypes"] == ("raised", "AssertionError")
    assert outcomes["Full windows"] == ("raised", "ValueError")
    assert stats()["violations"] == {}
