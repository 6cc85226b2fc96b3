"""G1 on FlashInfer's paged prefill/decode wrappers (0.7.2.post1; 0.7.4 under test_flashinfer_next.py): plan()
records the layout host-side, run() checks q.shape[0] against it before the kernel.

The wrappers cannot be constructed or planned without CUDA (pinned memory, JIT modules), so the tests
replace the classes' own plan/run with recording stand-ins carrying their signatures (the `calls` fixture,
conftest.py), then install the guard around them, as vLLM would call them."""

from __future__ import annotations

import functools

import pytest
import torch
from flashinfer.decode import BatchDecodeWithPagedKVCacheWrapper as Decode
from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper as Prefill
from sg_runtime_helpers import paged_wrapper

from specguard.runtime import SpecGuardViolation, stats
from specguard.runtime.scalar_reads import ScalarReads

I32 = torch.int32


def _prefill_plan(w, qo_indptr) -> None:
    kv_indptr = torch.tensor([0, 1, 2, 3], dtype=I32)
    Prefill.plan(w, qo_indptr, kv_indptr, torch.arange(3, dtype=I32), torch.full((3,), 5, dtype=I32), 4, 4, 64, 16)


def test_prefill_run_matches_plan(calls, guard) -> None:
    guard("raise")
    w = paged_wrapper(Prefill)
    _prefill_plan(w, torch.tensor([0, 4, 8, 12], dtype=I32))
    Prefill.run(w, torch.randn(12, 4, 64), torch.zeros(4, 16, 4, 64))
    assert calls == ["BatchPrefillWithPagedKVCacheWrapper.plan", "BatchPrefillWithPagedKVCacheWrapper.run"]
    with pytest.raises(SpecGuardViolation) as err:
        Prefill.run(w, torch.randn(16, 4, 64), torch.zeros(4, 16, 4, 64))
    assert len(calls) == 2  # the kernel was not reached
    msg = str(err.value)
    assert "[specguard G1 tokens vs query layout] BatchPrefillWithPagedKVCacheWrapper.run" in msg
    assert "q.shape[0] (16) does not match qo_indptr[-1] (12) recorded at plan()" in msg


def test_prefill_device_indptr_is_skipped_not_read(calls, guard) -> None:
    guard("raise")
    w = paged_wrapper(Prefill)
    _prefill_plan(w, torch.tensor([0, 4, 8, 12], dtype=I32, device="meta"))
    Prefill.run(w, torch.randn(16, 4, 64), torch.zeros(4, 16, 4, 64))  # unchecked, not failed
    skips = stats()["skips"]
    assert skips == {
        "G1:BatchPrefillWithPagedKVCacheWrapper.plan:plan() qo_indptr is on meta: reading it would "
        "synchronise the device": 1,
        "G1:BatchPrefillWithPagedKVCacheWrapper.run:run() without a plan() the guard recorded": 1,
    }


def test_decode_rows_exact_and_tiled_backends(calls, guard) -> None:
    guard("raise")
    indptr, idx, last = (
        torch.tensor([0, 1, 2, 3, 4], dtype=I32),
        torch.arange(4, dtype=I32),
        torch.ones(4, dtype=I32),
    )
    w = paged_wrapper(Decode)
    Decode.plan(w, indptr, idx, last, 4, 4, 64, 16, q_len_per_req=2)
    Decode.run(w, torch.randn(8, 4, 64), torch.zeros(4, 16, 4, 64))
    with pytest.raises(SpecGuardViolation, match=r"q.shape\[0\] \(6\) does not match the decode plan: expected 8"):
        Decode.run(w, torch.randn(6, 4, 64), torch.zeros(4, 16, 4, 64))
    tiled = paged_wrapper(Decode, backend="trtllm-gen")
    Decode.plan(tiled, indptr, idx, last, 4, 4, 64, 16)
    Decode.run(tiled, torch.randn(12, 4, 64), torch.zeros(4, 16, 4, 64))  # 3 rows per request: allowed here
    with pytest.raises(SpecGuardViolation, match="a multiple of the 4 planned requests"):
        Decode.run(tiled, torch.randn(10, 4, 64), torch.zeros(4, 16, 4, 64))
    assert calls.count("BatchDecodeWithPagedKVCacheWrapper.run") == 2


def test_plan_and_run_add_no_scalar_reads(calls, guard) -> None:
    def reads() -> int:
        w = paged_wrapper(Prefill)
        with ScalarReads() as mode:
            _prefill_plan(w, torch.tensor([0, 4, 8, 12], dtype=I32))
            Prefill.run(w, torch.randn(12, 4, 64), torch.zeros(4, 16, 4, 64))
        return mode.count

    unguarded = reads()
    guard("raise")
    assert reads() == unguarded
    assert stats()["checks_run"] == {"G1:BatchPrefillWithPagedKVCacheWrapper.run": 1}


def test_aliases_follow_the_wrapped_methods(guard) -> None:
    guard("raise")
    from specguard.runtime.patching import is_wrapped

    assert is_wrapped(Prefill.__dict__["begin_forward"]) and Prefill.begin_forward is Prefill.plan
    rrl = Prefill.__dict__["run_return_lse"]
    assert isinstance(rrl, functools.partialmethod) and rrl.func is Prefill.__dict__["run"]


def test_decode_plan_binds_q_len_per_req_positionally(calls, guard) -> None:
    """Issue 12 item 2: q_len_per_req passed positionally (flashinfer-python 0.7.2.post1 maps the optional
    arguments after page_size by its own list of names) is the one G1 uses: no false G1."""
    from flashinfer import decode

    guard("raise")
    indptr, idx, last = (
        torch.tensor([0, 1, 2, 3, 4], dtype=I32),
        torch.arange(4, dtype=I32),
        torch.ones(4, dtype=I32),
    )
    legacy = decode._BATCH_DECODE_PLAN_LEGACY_POS_ARGS
    optional = {name: None for name in legacy}
    optional.update(pos_encoding_mode="NONE", window_left=-1, non_blocking=True, disable_split_kv=False)
    optional["q_len_per_req"] = 3
    w = paged_wrapper(Decode)
    Decode.plan(w, indptr, idx, last, 4, 4, 64, 16, *[optional[name] for name in legacy])
    Decode.run(w, torch.randn(12, 4, 64), torch.zeros(4, 16, 4, 64))  # 4 requests x 3 tokens
    with pytest.raises(SpecGuardViolation, match=r"expected 12 \(= 4 requests x 3\)"):
        Decode.run(w, torch.randn(4, 4, 64), torch.zeros(4, 16, 4, 64))
    # by keyword, and the run query by keyword too
    Decode.plan(w, indptr, idx, last, 4, 4, 64, 16, q_len_per_req=2)
    Decode.run(w, q=torch.randn(8, 4, 64), paged_kv_cache=torch.zeros(4, 16, 4, 64))
    assert stats()["violations"] == {"G1:BatchDecodeWithPagedKVCacheWrapper.run": 1}


def _decode_plan_args(n: int) -> tuple:
    return (torch.arange(n + 1, dtype=I32), torch.arange(n, dtype=I32), torch.ones(n, dtype=I32), 4, 4, 64, 16)


@pytest.fixture
def fast_decode_plan(monkeypatch) -> list[str]:
    """FlashInfer's fast_decode_plan (it needs CUDA) as a recording stand-in with its signature, in flashinfer.decode
    and in the package, as vLLM and SGLang import it; request it before `guard`, which then wraps the stand-in."""
    import flashinfer
    import flashinfer.decode

    record: list[str] = []
    real = flashinfer.decode.fast_decode_plan

    @functools.wraps(real)
    def stand_in(self, *args, **kwargs) -> None:
        record.append("fast_decode_plan")

    monkeypatch.setattr(flashinfer.decode, "fast_decode_plan", stand_in)
    monkeypatch.setattr(flashinfer, "fast_decode_plan", stand_in)
    return record


def test_per_instance_fast_decode_plan_records(calls, fast_decode_plan, guard) -> None:
    """SGLang's `begin_forward = partial(fast_decode_plan, w)` (and vLLM's direct call) plan without plan():
    the guard wraps FlashInfer's function wherever it is bound, so run() is judged against the latest plan."""
    import flashinfer

    guard("raise")
    assert flashinfer.fast_decode_plan is flashinfer.decode.fast_decode_plan  # one wrapper, both bindings
    w = paged_wrapper(Decode)
    Decode.plan(w, *_decode_plan_args(4))  # the capture's real plan(): 4 requests
    w.begin_forward = functools.partial(flashinfer.fast_decode_plan, w)
    assert w.begin_forward.func == flashinfer.fast_decode_plan  # SGLang's test of which planner a wrapper uses
    w.begin_forward(*_decode_plan_args(3))
    Decode.run(w, torch.randn(3, 4, 64), torch.zeros(4, 16, 4, 64))
    with pytest.raises(SpecGuardViolation, match=r"q.shape\[0\] \(4\) does not match the decode plan: expected 3"):
        Decode.run(w, torch.randn(4, 4, 64), torch.zeros(4, 16, 4, 64))
    assert fast_decode_plan == ["fast_decode_plan"]
    assert calls.count("BatchDecodeWithPagedKVCacheWrapper.run") == 1


def test_unrecorded_per_instance_planner_is_skipped(calls, guard) -> None:
    """A planner the guard did not wrap, installed on the instance, leaves the recorded layout possibly stale:
    run() is not judged (counted as a skip), never reported."""
    guard("raise")
    w = paged_wrapper(Decode)
    Decode.plan(w, *_decode_plan_args(4))

    def own_planner(wrapper, *args, **kwargs) -> None:  # a fork's planner
        pass

    w.begin_forward = functools.partial(own_planner, w)
    w.begin_forward(*_decode_plan_args(3))
    Decode.run(w, torch.randn(3, 4, 64), torch.zeros(4, 16, 4, 64))  # 3 rows against a recorded 4: not judged
    assert calls.count("BatchDecodeWithPagedKVCacheWrapper.run") == 1
    (skip,) = stats()["skips"]
    assert skip.startswith("G1:BatchDecodeWithPagedKVCacheWrapper.run:this wrapper plans through")


def test_ragged_prefill_run_matches_plan(calls, guard) -> None:
    """The ragged prefill wrapper (SGLang's and vLLM's MLA prefill) is judged as the paged one."""
    from flashinfer.prefill import BatchPrefillWithRaggedKVCacheWrapper as Ragged

    guard("raise")
    w = paged_wrapper(Ragged)
    indptr = torch.tensor([0, 5, 9], dtype=I32)
    Ragged.plan(w, indptr, indptr, 4, 4, 64)
    Ragged.run(w, torch.randn(9, 4, 64), torch.zeros(9, 4, 64), torch.zeros(9, 4, 64))
    with pytest.raises(SpecGuardViolation, match=r"q.shape\[0\] \(12\) does not match qo_indptr\[-1\] \(9\)"):
        Ragged.run(w, torch.randn(12, 4, 64), torch.zeros(12, 4, 64), torch.zeros(12, 4, 64))
    assert calls == ["BatchPrefillWithRaggedKVCacheWrapper.plan", "BatchPrefillWithRaggedKVCacheWrapper.run"]
