"""Issue 18 item 1: G0 judges each build by its batch's CUDA-graph mode, the dispatcher's decision for that
batch, not by what the process could capture. vLLM 0.33.0's real `CudagraphDispatcher`, the V1 runner's and
the V1 proposer's real `_determine_batch_execution_and_padding`, and the real CPU attention builder, under
FULL_AND_PIECEWISE (the default on GPUs): a padded count passes only in a batch dispatched as FULL."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from sg_runtime_helpers import common_metadata as _cm
from sg_runtime_helpers import cpu_config
from vllm.config import CompilationConfig
from vllm.config.compilation import CompilationMode, CUDAGraphMode
from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from specguard.runtime import SpecGuardViolation, batch_mode, stats
from specguard.runtime.patching import Patcher, is_wrapped
from specguard.runtime.scalar_reads import ScalarReads

SIZES = [1, 2, 4, 8, 16, 32, 48, 64]
K = 3  # draft tokens: a uniform decode batch has 1 + K query tokens per request


def dispatcher(mode: CUDAGraphMode) -> CudagraphDispatcher:
    """vLLM's dispatcher with the keys it captures for `mode` (the compilation config as VllmConfig finishes
    it for a GPU: piecewise splitting at attention, the largest capture size)."""
    cc = CompilationConfig(mode=CompilationMode.VLLM_COMPILE, cudagraph_mode=mode, cudagraph_capture_sizes=SIZES)
    cc.set_splitting_ops_for_v1(all2all_backend="naive")
    cc.max_cudagraph_capture_size = max(SIZES)
    config = types.SimpleNamespace(
        compilation_config=cc,
        num_speculative_tokens=K,
        lora_config=None,
        scheduler_config=types.SimpleNamespace(max_num_seqs=16),
        speculative_config=None,
        parallel_config=types.SimpleNamespace(data_parallel_size=1),
    )
    d = CudagraphDispatcher(config)
    d.initialize_cudagraph_keys(mode, uniform_decode_query_len=1 + K)
    return d


def runner() -> GPUModelRunner:
    """The V1 runner with what its batch decision reads (its __init__ needs a device and a model)."""
    r = object.__new__(GPUModelRunner)
    r.__dict__.update(
        uniform_decode_query_len=1 + K,
        model_config=types.SimpleNamespace(is_encoder_decoder=False),
        input_batch=types.SimpleNamespace(lora_id_to_lora_request={}),
        cudagraph_dispatcher=dispatcher(CUDAGraphMode.FULL_AND_PIECEWISE),
        vllm_config=types.SimpleNamespace(
            parallel_config=types.SimpleNamespace(data_parallel_size=1),
            observability_config=types.SimpleNamespace(cudagraph_metrics=False),
        ),
    )
    return r


def proposer(mode: CUDAGraphMode) -> SpecDecodeBaseProposer:
    """A V1 speculator with its own dispatcher (EAGLE captures its drafts in their own mode)."""
    p = object.__new__(SpecDecodeBaseProposer)
    p.__dict__.update(
        cudagraph_dispatcher=dispatcher(mode),
        vllm_config=types.SimpleNamespace(parallel_config=types.SimpleNamespace(data_parallel_size=1)),
    )
    return p


def decide(r: GPUModelRunner, q_lens: list[int], **kwargs: object) -> tuple:
    """The runner's decision for a batch of these query lengths, as execute_model asks for it."""
    return r._determine_batch_execution_and_padding(
        num_tokens=sum(q_lens),
        num_reqs=len(q_lens),
        num_scheduled_tokens_np=np.array(q_lens, dtype=np.int32),
        max_num_scheduled_tokens=max(q_lens),
        **kwargs,
    )


UNIFORM = [1 + K] * 11  # 44 tokens of uniform decode: a FULL graph of 48
MIXED = [5, 3] + [1 + K] * 9  # 44 tokens, not uniform: a PIECEWISE graph of 48


@pytest.fixture
def gpu_builder(cpu_builder):
    """The CPU backend's real builder in a process configured like a GPU one (FULL graphs captured), so that
    without the batch's decision G0 could only check `<=`."""
    return cpu_builder(cpu_config("FULL_AND_PIECEWISE", SIZES))


def test_a_padded_count_passes_in_a_full_batch_and_is_sg103_in_piecewise_or_eager(gpu_builder, guard) -> None:
    guard("raise")
    r = runner()
    mode, desc, *_ = decide(r, UNIFORM)
    assert (mode, desc.num_tokens) == (CUDAGraphMode.FULL, 48)
    gpu_builder.build(0, _cm(UNIFORM, num_actual_tokens=48))  # what the V1 runner builds for a FULL batch

    for q_lens, kwargs, expected in ((MIXED, {}, "PIECEWISE"), (UNIFORM, {"force_eager": True}, "NONE")):
        mode, desc, *_ = decide(r, q_lens, **kwargs)
        assert mode.name == expected
        with pytest.raises(SpecGuardViolation) as err:
            gpu_builder.build(0, _cm(q_lens, num_actual_tokens=48))
        message = str(err.value)
        assert (
            f"query_start_loc_cpu[num_reqs] (44) != num_actual_tokens (48) for 11 requests outside FULL CUDA "
            f"graphs (this batch: {expected}, dispatched by GPUModelRunner): 4 tokens that no request owns"
        ) in message
        assert "Static rule that finds it: SG103 padded-token-count" in message
        assert f"batch_cudagraph_mode={expected}, dispatched by GPUModelRunner" in message
    assert len(gpu_builder.seen) == 1  # the backend saw only the FULL batch's build


def test_a_full_batch_may_not_pad_past_its_graph(gpu_builder, guard) -> None:
    guard("raise")
    decide(runner(), UNIFORM)
    with pytest.raises(SpecGuardViolation, match=r"\(44\) != num_actual_tokens \(52\) .* in a FULL graph of 48 tokens"):
        gpu_builder.build(0, _cm(UNIFORM, num_actual_tokens=52, slot_mapping=np.zeros(52)))


def test_draft_builds_follow_the_speculators_own_dispatch(gpu_builder, guard) -> None:
    """The target batch replays a FULL graph; the speculator then dispatches its own batch, PIECEWISE: a
    padded draft build after that is the seed's desync, whatever the target's mode was."""
    guard("raise")
    decide(runner(), UNIFORM)
    gpu_builder.build_for_drafting(_cm(UNIFORM, num_actual_tokens=48), draft_index=0)  # target's FULL batch
    mode, padded, _ = proposer(CUDAGraphMode.PIECEWISE)._determine_batch_execution_and_padding(11)
    assert (mode, padded) == (CUDAGraphMode.PIECEWISE, 16)
    with pytest.raises(SpecGuardViolation, match=r"this batch: PIECEWISE, dispatched by SpecDecodeBaseProposer"):
        gpu_builder.build_for_drafting(_cm([1] * 11, num_actual_tokens=16), draft_index=1)
    assert proposer(CUDAGraphMode.FULL)._determine_batch_execution_and_padding(11)[:2] == (CUDAGraphMode.FULL, 16)
    gpu_builder.build_for_drafting(_cm([1] * 11, num_actual_tokens=16), draft_index=1)  # a FULL draft batch


def test_without_a_decision_the_process_config_decides(cpu_builder, gpu_builder, guard) -> None:
    guard("raise")
    batch_mode.forget()
    gpu_builder.build(0, _cm(UNIFORM, num_actual_tokens=48))  # a process that captures FULL graphs: <=
    with pytest.raises(SpecGuardViolation, match="this process captures no FULL graph"):
        cpu_builder().build(0, _cm(UNIFORM, num_actual_tokens=48))


def test_recording_the_decision_changes_nothing_vllm_returns_and_reads_no_device_value(guard) -> None:
    r = runner()
    cases = [(UNIFORM, {}), (MIXED, {}), (UNIFORM, {"force_eager": True}), ([70], {})]
    unguarded = [decide(r, q, **kw) for q, kw in cases]
    guard("raise")
    assert is_wrapped(GPUModelRunner.__dict__[batch_mode.METHOD])
    assert is_wrapped(SpecDecodeBaseProposer.__dict__[batch_mode.METHOD])
    with ScalarReads() as reads:
        guarded = [decide(r, q, **kw) for q, kw in cases]
    assert reads.count == 0
    assert guarded == unguarded
    assert batch_mode.latest() == batch_mode.Decision("NONE", 70, "GPUModelRunner")
    assert stats()["guard_errors"] == {}


def test_deciders_imported_after_install_are_wrapped_at_the_next_build(monkeypatch) -> None:
    """vLLM imports its runner after plugins load; the guard wraps it when a build finds it imported."""
    monkeypatch.setattr(batch_mode, "V1_DECIDERS", (("sg_late_runner", "Runner"),))
    hooks = batch_mode.Hooks(Patcher())
    hooks.poll()
    assert hooks.pending

    class Runner:
        def _determine_batch_execution_and_padding(self, n: int) -> tuple:
            return CUDAGraphMode.FULL, n, None

    class Subclass(Runner):
        def _determine_batch_execution_and_padding(self, n: int) -> tuple:
            return CUDAGraphMode.PIECEWISE, n + 1, None

    monkeypatch.setitem(sys.modules, "sg_late_runner", types.SimpleNamespace(Runner=Runner))
    hooks.poll()
    assert not hooks.pending and hooks.wrapped == [f"Runner.{batch_mode.METHOD}", f"Subclass.{batch_mode.METHOD}"]
    Subclass()._determine_batch_execution_and_padding(7)
    assert batch_mode.latest() == batch_mode.Decision("PIECEWISE", 8, "Subclass")
    hooks.patcher.restore()
    assert not is_wrapped(Runner.__dict__[batch_mode.METHOD])
    batch_mode.forget()
