"""Shared stand-ins for the blind_r1 scenarios (not a scenario itself).

Everything here builds *inputs* for real SGLang code: a DP-attention runtime
context (SGLang's own ``create_context`` / ``initialize_dp_attention`` /
``init_dp_gathered_buffer``), a minimal model-runner stand-in, a recording
attention backend stand-in, and real ``ForwardBatch`` / spec-input objects
with CPU tensors. No ForwardBatch method is replaced.

Requires PYTHONPATH=/tmp/sgrt:/tmp/sgrt/target:/tmp/sgrt/deps and
``import tvfix`` before sglang is imported (done here too, idempotently).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from types import SimpleNamespace
from typing import List, Optional

import tvfix  # noqa: F401  (torchvision op schemas; must precede sglang)
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_MODEL_DIR = os.path.join(_HERE, "_tiny_llama")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sglang.srt.model_executor.forward_batch_info as fbi  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    ForwardBatch,
    ForwardMode,
)

_STATE = {}


def _build_context():
    """One DP-attention context: tp=2, dp=2 (attn_tp=1, attn_dp=2), rank 0."""
    from sglang.srt import runtime_context as rc
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers.dp_attention import (
        init_dp_gathered_buffer,
        initialize_dp_attention,
    )
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(
        model_path=_MODEL_DIR,
        device="cpu",
        enable_dp_attention=True,
        tp_size=2,
        dp_size=2,
        skip_server_warmup=True,
        skip_tokenizer_init=True,
    )
    ctx = rc.create_context(server_args, role="test")
    with rc.use_context(ctx):
        parallel = rc.get_parallel()
        # No process groups on a CPU host: state rank 0 and a TP group handle
        # without a custom all-reduce communicator.
        parallel.override_permanently(
            tp_rank=0, tp_group=SimpleNamespace(ca_comm=None, world_size=2)
        )
        initialize_dp_attention(server_args)
        model_config = ModelConfig.from_server_args(server_args)
        init_dp_gathered_buffer(model_config)
    return ctx, server_args, model_config


@contextlib.contextmanager
def dp_runtime():
    """Activate the DP-attention context for the duration of a scenario.

    Also states the CPU-host platform fact for forward_batch_info (its
    ``_is_cpu`` module flag, normally from SGLANG_USE_CPU_ENGINE=1 which cannot
    be set here because sgl_kernel has no CPU build): without it
    prepare_mlp_sync_batch asks for pinned host memory, which a CPU-only torch
    refuses. Restored on exit.
    """
    from sglang.srt import runtime_context as rc

    if "ctx" not in _STATE:
        _STATE["ctx"], _STATE["server_args"], _STATE["model_config"] = (
            _build_context()
        )
    saved_is_cpu = fbi._is_cpu
    fbi._is_cpu = True
    try:
        with rc.use_context(_STATE["ctx"]), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        fbi._is_cpu = saved_is_cpu


class RecordingAttnBackend:
    """Attention-backend stand-in: remembers the geometry it last planned for.

    ``init_forward_metadata`` records (batch_size, rows of input_ids) the way a
    FlashInfer plan fixes qo_indptr / kv_indptr for that geometry;
    ``plan_matches`` is what the kernels implicitly rely on at run time.
    """

    def __init__(self, name="attn"):
        self.name = name
        self.plans = []

    # -- planning ----------------------------------------------------------
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        self.plans.append(geometry(forward_batch))

    @property
    def plan(self):
        return self.plans[-1] if self.plans else None

    def plan_matches(self, forward_batch: ForwardBatch) -> bool:
        return self.plan == geometry(forward_batch)

    # -- what _pad_inputs_to_size / prepare_mlp_sync_batch ask of a backend --
    def get_cpu_graph_seq_len_fill_value(self):
        return 1

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    def late_layer_num_tokens(self, forward_batch):
        return None


def geometry(forward_batch: ForwardBatch):
    rows = forward_batch.input_ids.shape[0] if forward_batch.input_ids is not None else 0
    return (forward_batch.batch_size, rows)


def model_runner(*, is_draft_worker: bool = False, backend=None):
    """The fields of ModelRunner that prepare_mlp_sync_batch / padding read."""
    return SimpleNamespace(
        model_config=_STATE["model_config"],
        is_draft_worker=is_draft_worker,
        attn_backend=backend if backend is not None else RecordingAttnBackend(),
        attn_tp_sequence_sharded=lambda num_tokens: False,
        enable_elastic_ep=False,
    )


def _i64(values):
    return torch.tensor(values, dtype=torch.int64)


def make_batch(
    mode: ForwardMode,
    *,
    bs: int,
    rows: int,
    global_num_tokens: Optional[List[int]] = None,
    is_extend_in_batch: bool = False,
    spec_info=None,
    extend: bool = False,
    **extra,
) -> ForwardBatch:
    """A real ForwardBatch with CPU tensors: ``bs`` requests, ``rows`` tokens."""
    seq_lens = _i64([8 + i for i in range(bs)])
    kw = dict(
        forward_mode=mode,
        batch_size=bs,
        input_ids=torch.arange(rows, dtype=torch.int64) % 200 + 1,
        req_pool_indices=_i64(list(range(bs))),
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.clone(),
        orig_seq_lens=seq_lens.clone(),
        out_cache_loc=torch.arange(100, 100 + rows, dtype=torch.int64),
        seq_lens_sum=int(seq_lens.sum()),
        positions=torch.arange(rows, dtype=torch.int64),
        spec_info=spec_info,
        is_extend_in_batch=is_extend_in_batch,
    )
    if extend:
        # Split `rows` extend tokens over `bs` requests.
        per = [rows // bs + (1 if i < rows % bs else 0) for i in range(bs)]
        kw.update(
            extend_num_tokens=rows,
            extend_seq_lens=torch.tensor(per, dtype=torch.int32),
            extend_prefix_lens=torch.tensor(
                [s - p for s, p in zip(seq_lens.tolist(), per)], dtype=torch.int32
            ),
            extend_start_loc=torch.tensor(
                [sum(per[:i]) for i in range(bs)], dtype=torch.int32
            ),
            extend_seq_lens_cpu=list(per),
            extend_prefix_lens_cpu=[s - p for s, p in zip(seq_lens.tolist(), per)],
            extend_logprob_start_lens_cpu=[0] * bs,
        )
    if global_num_tokens is not None:
        n = len(global_num_tokens)
        kw.update(
            global_num_tokens_cpu=list(global_num_tokens),
            global_num_tokens_gpu=torch.zeros(n, dtype=torch.int64),
            global_num_tokens_for_logprob_cpu=list(global_num_tokens),
            global_num_tokens_for_logprob_gpu=torch.zeros(n, dtype=torch.int64),
        )
    kw.update(extra)
    return ForwardBatch(**kw)


# -- speculative inputs (real SGLang dataclasses) ----------------------------
HIDDEN = 64


def eagle_draft_extend_input(bs: int, num_draft_tokens: int):
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    rows = bs * num_draft_tokens
    return EagleDraftExtendInput(
        hidden_states=torch.zeros(rows, HIDDEN),
        num_correct_drafts=torch.ones(bs, dtype=torch.int32),
        num_accept_tokens=torch.full((bs,), 2, dtype=torch.int32),
        num_accept_tokens_cpu=[2] * bs,
        num_tokens_per_req=num_draft_tokens,
        num_tokens_for_logprob_per_req=1,
    )


def eagle_draft_input(bs: int, topk: int):
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    return EagleDraftInput(
        topk_p=torch.full((bs, topk), 1.0 / topk),
        topk_index=torch.zeros(bs, topk, dtype=torch.int64),
        hidden_states=torch.zeros(bs * topk, HIDDEN),
        bonus_tokens=torch.ones(bs, dtype=torch.int32),
        num_tokens_per_req=topk,
        num_tokens_for_logprob_per_req=topk,
    )


def eagle_verify_input(bs: int, draft_token_num: int, spec_steps: int = 3, topk: int = 1):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    rows = bs * draft_token_num
    seq_lens_cpu = _i64([8 + i for i in range(bs)])
    return EagleVerifyInput(
        draft_token=torch.ones(rows, dtype=torch.int64),
        custom_mask=torch.ones(rows * 16, dtype=torch.bool),
        positions=torch.arange(rows, dtype=torch.int64),
        retrieve_index=torch.arange(rows, dtype=torch.int64).view(bs, draft_token_num),
        retrieve_next_token=torch.full((bs, draft_token_num), -1, dtype=torch.int64),
        retrieve_next_sibling=torch.full((bs, draft_token_num), -1, dtype=torch.int64),
        retrieve_cum_len=None,
        spec_steps=spec_steps,
        topk=topk,
        draft_token_num=draft_token_num,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        seq_lens_sum=int(seq_lens_cpu.sum()),
        seq_lens_cpu=seq_lens_cpu,
    )


# -- the forward's decision, as SGLang's runners take it ---------------------
def forward_decides_and_runs(forward_batch: ForwardBatch, backend: RecordingAttnBackend) -> bool:
    """EagerRunner._execute_decode / _execute_extend, attention part:
    ``if forward_batch.needs_forward_metadata_init(): attn_backend.init_forward_metadata(fb)``
    then the kernels run on whatever plan the backend holds.
    Returns True when they run on a plan for a different geometry (stale)."""
    if forward_batch.needs_forward_metadata_init():
        backend.init_forward_metadata(forward_batch)
    return not backend.plan_matches(forward_batch)


def check(stale: bool, expect_stale: bool, what: str) -> None:
    """Self-check of the scenario's label against what actually happened."""
    if stale != expect_stale:
        raise AssertionError(
            f"{what}: attention ran on a {'stale' if stale else 'fresh'} plan, "
            f"scenario expected {'stale' if expect_stale else 'fresh'}"
        )


def eager_load_batch_no_copy(forward_batch: ForwardBatch) -> ForwardBatch:
    """EagerRunner.load_batch with SGLANG_EAGER_INPUT_NO_COPY: the eager
    decode/extend paths then ask needs_forward_metadata_init() on the
    ``dataclasses.replace`` copy it returns, not on the batch that was marked."""
    from sglang.srt.environ import envs
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner

    with envs.SGLANG_EAGER_INPUT_NO_COPY.override(True):
        return EagerRunner.load_batch(SimpleNamespace(), forward_batch)
