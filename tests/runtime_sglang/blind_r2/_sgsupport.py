"""Support for the blind_r2 scenarios: a CPU-only stand-in world around real
SGLang 0.5.23 code.

Real SGLang pieces used as-is:
  * ForwardBatch (mark_forward_metadata_ready, needs_forward_metadata_init,
    apply_deprecated_skip_attn_backend_init, prepare_mlp_sync_batch,
    _pad_inputs_to_size, post_forward_mlp_sync_batch)
  * ModelRunner.forward / _forward_raw / _prepare_eager_forward_batch
    (bound onto a minimal stand-in model-runner class)
  * EagerRunner (real __init__ with run_warmup=False, real execute /
    _execute_decode / _execute_extend / _execute_idle / load_batch with the
    real eager input registry)
  * RadixAttention (real nn.Module) -> forward context -> the real base
    method AttentionBackend.forward -> forward_decode / forward_extend
  * RuntimeContext (create_context / use_context with a DP-attention
    ServerArgs: tp=4, dp=4 (or tp=4, dp=2), enable_dp_attention, EAGLE)
  * EagleDraftWorker.draft_forward / _draft_forward_idle (eagle_worker_v2.py)
    and FrozenKVMTPDraftWorker._init_frozen_kv_metadata, bound to minimal
    stand-in worker objects
  * EagleDraftInput / EagleDraftExtendInput / EagleVerifyInput as spec_info

Stand-ins (the only things that are not SGLang's own code):
  * CPU attention backends (subclasses of AttentionBackend) whose
    forward_decode / forward_extend are cheap CPU stand-ins for the kernels;
    they record what init_forward_metadata planned and what each launch saw.
  * a tiny model whose forward calls real RadixAttention layers.
  * a minimal model-runner object carrying the attributes ModelRunner's
    forward path reads.
  * empty import shims for uvicorn / setproctitle when not installed.

While a scenario runs, forward_batch_info._is_cpu is set True (restored on
exit) so prepare_mlp_sync_batch does not ask for pinned memory on this
CPU-only machine, and the parallel context is overridden with this process's
ranks and a TP group without a custom all-reduce communicator.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import types
from types import SimpleNamespace
from typing import List

import tvfix  # noqa: F401  (must precede sglang imports)
import torch

# Import shims for two process-level packages that are not installed in this
# CPU venv and are never used on the forward path:
#   * uvicorn: model_runner.py -> distributed/bootstrap -> gated_launch does a
#     top-level ``import uvicorn`` (HTTP server).
#   * setproctitle: eagle_worker_v2.py -> managers/scheduler.py imports it at
#     top level (process title of the scheduler process).
# An empty module is registered only when the package is truly absent.
for _name in ("uvicorn", "setproctitle"):
    if _name not in sys.modules and importlib.util.find_spec(_name) is None:
        _shim = types.ModuleType(_name)
        _shim.__doc__ = "blind_r2 import shim: package not installed here"
        sys.modules[_name] = _shim

from sglang.srt import runtime_context as rc
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor import forward_batch_info as fbi
from sglang.srt.model_executor.cuda_graph_config import default_cuda_graph_config
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import (
    ForwardContext,
    forward_context,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.model_executor.runner.eager_runner import EagerRunner
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

HEADS = 2
HEAD_DIM = 4
HIDDEN = HEADS * HEAD_DIM


# ---------------------------------------------------------------------------
# Runtime context (DP attention, 4 attention-DP ranks, this process is rank 0)
# ---------------------------------------------------------------------------

_CTX_CACHE = {}


def _make_context(spec: bool, tp: int, dp: int):
    key = (spec, tp, dp)
    if key in _CTX_CACHE:
        return _CTX_CACHE[key]
    kwargs = dict(
        model_path="dummy",
        device="cpu",
        tp_size=tp,
        dp_size=dp,
        enable_dp_attention=True,
        skip_server_warmup=True,
    )
    if spec:
        kwargs.update(
            speculative_algorithm="EAGLE",
            speculative_num_steps=3,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=4,
        )
    sa = ServerArgs(**kwargs)
    ctx = rc.create_context(sa, role="scheduler")
    ctx.override("blind_r2", cuda_graph_config=default_cuda_graph_config())
    _CTX_CACHE[key] = ctx
    return ctx


@contextlib.contextmanager
def sglang_env(spec: bool = True, tp: int = 4, dp: int = 4):
    """Activate a DP-attention runtime context for the duration of a scenario
    (default: tp=4, dp=4 -> 4 attention-DP ranks of attn-TP width 1; tp=4,
    dp=2 -> 2 attention-DP ranks of attn-TP width 2). This process is rank 0.

    ``_is_cpu`` is flipped so ``prepare_mlp_sync_batch`` does not ask for
    pinned memory on this CPU-only machine (restored on exit)."""
    ctx = _make_context(spec, tp, dp)
    saved_is_cpu = fbi._is_cpu
    fbi._is_cpu = True
    try:
        with rc.use_context(ctx):
            with rc.get_parallel().override(
                tp_rank=0, attn_tp_rank=0, attn_dp_rank=0, attn_cp_rank=0,
                dp_rank=0,
                # No process groups on this machine: a TP group without a
                # custom all-reduce communicator.
                tp_group=SimpleNamespace(ca_comm=None),
            ):
                yield ctx
    finally:
        fbi._is_cpu = saved_is_cpu


# ---------------------------------------------------------------------------
# CPU attention backends
# ---------------------------------------------------------------------------

LAUNCH_LOG: List[dict] = []
# (mode, rows) of every RadixAttention call the tiny model makes, i.e. every
# time an attention layer hands the batch to AttentionBackend.forward.
LAYER_CALLS: List[list] = []


def reset_log():
    LAUNCH_LOG.clear()
    LAYER_CALLS.clear()


def _shape(fb: ForwardBatch):
    n = fb.input_ids.shape[0] if fb.input_ids is not None else 0
    return (int(fb.batch_size), int(n))


class _CpuKernels:
    """Stand-in kernels shared by the CPU backends."""

    name = "cpu"

    def _launch(self, kind, q, layer, forward_batch):
        plan = self.forward_metadata
        planned = (plan.bs, plan.num_tokens) if plan is not None else None
        LAUNCH_LOG.append(
            dict(
                backend=self.name,
                kind=kind,
                layer=int(layer.layer_id),
                shape=list(_shape(forward_batch)),
                planned=list(planned) if planned else None,
                stale=planned is not None and planned != _shape(forward_batch),
            )
        )
        return q.new_zeros(q.shape[0], layer.tp_q_head_num * layer.v_head_dim)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kw):
        return self._launch("decode", q, layer, forward_batch)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kw):
        return self._launch("extend", q, layer, forward_batch)

    def get_cpu_graph_seq_len_fill_value(self):
        return 1

    def get_cuda_graph_seq_len_fill_value(self):
        return 1


class CpuPlannedBackend(_CpuKernels, AttentionBackend):
    """Backend with its own eager body (overrides init_forward_metadata), like
    the flashinfer / triton backends."""

    def __init__(self, name="target"):
        self.name = name
        self.forward_metadata = None
        self.plans = []

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        bs, n = _shape(forward_batch)
        self.forward_metadata = SimpleNamespace(bs=bs, num_tokens=n)
        self.plans.append([bs, n])


class CpuGraphStyleBackend(_CpuKernels, AttentionBackend):
    """Backend that keeps the base class's init_forward_metadata wrapper and
    only implements the out-of-graph half (like the newer graph-style
    backends)."""

    def __init__(self, name="graphstyle"):
        self.name = name
        self.forward_metadata = None
        self.plans = []

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        bs, n = _shape(forward_batch)
        self.forward_metadata = SimpleNamespace(bs=bs, num_tokens=n)
        self.plans.append([bs, n])


class CpuMultiStepDraftBackend:
    """Mirror of TritonMultiStepDraftBackend: NOT an AttentionBackend itself;
    its init_forward_metadata calls each per-step child's
    init_forward_metadata(forward_batch)."""

    def __init__(self, num_steps: int, child_cls=CpuPlannedBackend):
        self.speculative_num_steps = num_steps
        self.attn_backends = [
            child_cls(name=f"draft_step{i}") for i in range(num_steps - 1)
        ]

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        for i in range(self.speculative_num_steps - 1):
            self.attn_backends[i].init_forward_metadata(forward_batch)


# ---------------------------------------------------------------------------
# Tiny model with real RadixAttention layers
# ---------------------------------------------------------------------------


class TinyModel(torch.nn.Module):
    def __init__(self, num_layers=2, vocab=32):
        super().__init__()
        self.vocab = vocab
        self.layers = torch.nn.ModuleList(
            [
                RadixAttention(
                    num_heads=HEADS,
                    head_dim=HEAD_DIM,
                    scaling=HEAD_DIM**-0.5,
                    num_kv_heads=HEADS,
                    layer_id=i,
                )
                for i in range(num_layers)
            ]
        )
        self.shared_experts_config = None

    def forward(self, input_ids, positions, forward_batch, **kwargs):
        n = input_ids.shape[0]
        h = torch.zeros(n, HIDDEN)
        for layer in self.layers:
            LAYER_CALLS.append([forward_batch.forward_mode.name, int(n)])
            q = h + 1.0
            out = layer(q, h.clone(), h.clone(), forward_batch)
            h = out.view(n, HIDDEN)
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput

        return LogitsProcessorOutput(
            next_token_logits=torch.zeros(n, self.vocab), hidden_states=h
        )


# ---------------------------------------------------------------------------
# Minimal model runner carrying the real forward-path methods
# ---------------------------------------------------------------------------


def _tiny_hf_config(num_layers):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=16,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        num_hidden_layers=num_layers,
        vocab_size=32,
        architectures=["LlamaForCausalLM"],
    )


class MiniModelRunner:
    # Real ModelRunner code, bound to this stand-in.
    forward = ModelRunner.forward
    _forward_raw = ModelRunner._forward_raw
    _prepare_eager_forward_batch = ModelRunner._prepare_eager_forward_batch
    _maybe_execute_deferred_mamba_cow_and_clear = (
        ModelRunner._maybe_execute_deferred_mamba_cow_and_clear
    )
    _pp_kwargs = ModelRunner._pp_kwargs
    _extend_forward_kwargs = ModelRunner._extend_forward_kwargs
    attn_tp_sequence_sharded = ModelRunner.attn_tp_sequence_sharded

    def __init__(self, attn_backend, *, is_draft_worker=False, num_layers=2):
        self.device = "cpu"
        self.attn_backend = attn_backend
        self.model = TinyModel(num_layers=num_layers)
        self.is_draft_worker = is_draft_worker
        self.is_generation = True
        self.support_pp = False
        self.forward_pass_id = 0
        self.msprobe_debugger = None
        self.canary_manager = None
        self.enable_elastic_ep = False
        self.eplb_manager = None
        self.decode_cuda_graph_runner = None
        self.prefill_cuda_graph_runner = None
        self.hisparse_coordinator = None
        self.lora_manager = None
        self.req_to_token_pool = None
        self.device_timer = None
        self.pp_group = SimpleNamespace(is_last_rank=True, is_first_rank=True)
        self.server_args = rc.get_server_args()
        self.spec_algorithm = SpeculativeAlgorithm.NONE
        self.max_running_requests = 16
        self.max_total_num_tokens = 256
        self.model_config = SimpleNamespace(
            is_encoder_decoder=False,
            hf_config=_tiny_hf_config(num_layers),
            model_is_mrope=False,
            linear_attn_registry_result=None,
        )
        self.kv_cache_dtype = torch.float32
        self.eager_runner = EagerRunner(self, run_warmup=False)

    def decode_num_tokens_per_req(self, num_draft_tokens=None):
        return 1


# ---------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------


def decode_batch(bs: int, *, spec_info=None, global_num_tokens=None):
    fb = ForwardBatch(
        forward_mode=ForwardMode.DECODE,
        batch_size=bs,
        input_ids=torch.arange(bs, dtype=torch.int64),
        req_pool_indices=torch.arange(bs, dtype=torch.int64),
        seq_lens=torch.full((bs,), 5, dtype=torch.int64),
        out_cache_loc=torch.arange(bs, dtype=torch.int64),
        seq_lens_sum=5 * bs,
        seq_lens_cpu=torch.full((bs,), 5, dtype=torch.int64),
        positions=torch.full((bs,), 4, dtype=torch.int64),
        spec_info=spec_info,
    )
    if global_num_tokens is not None:
        set_dp_counts(fb, global_num_tokens)
    return fb


def set_dp_counts(fb: ForwardBatch, global_num_tokens, *, is_extend=False):
    fb.global_num_tokens_cpu = list(global_num_tokens)
    fb.global_num_tokens_for_logprob_cpu = list(global_num_tokens)
    fb.original_global_num_tokens_cpu = list(global_num_tokens)
    fb.global_num_tokens_gpu = torch.tensor(global_num_tokens, dtype=torch.int64)
    fb.global_num_tokens_for_logprob_gpu = torch.tensor(
        global_num_tokens, dtype=torch.int64
    )
    fb.is_extend_in_batch = is_extend
    fb.can_run_dp_prefill_cuda_graph = False


def launches():
    return [dict(d) for d in LAUNCH_LOG]


def stale_launches():
    return sum(1 for d in LAUNCH_LOG if d["stale"])


# ---------------------------------------------------------------------------
# More batch builders (speculative inputs are SGLang's own dataclasses)
# ---------------------------------------------------------------------------


def eagle_draft_input(bs: int, topk: int = 1):
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    return EagleDraftInput(
        topk_p=torch.ones(bs, topk),
        topk_index=torch.arange(bs * topk, dtype=torch.int64).view(bs, topk) % 7,
        hidden_states=torch.zeros(bs, HIDDEN),
        num_tokens_per_req=topk,
        num_tokens_for_logprob_per_req=topk,
    )


def draft_decode_batch(bs: int, *, topk: int = 1, steps: int = 3, global_num_tokens=None):
    """The draft-decode batch EagleDraftWorker.draft() builds: bs requests,
    one row per request (topk=1), out_cache_loc for every step."""
    fb = decode_batch(bs, spec_info=eagle_draft_input(bs, topk))
    fb.out_cache_loc = torch.arange(bs * topk * steps, dtype=torch.int64)
    fb.capture_hidden_mode = CaptureHiddenMode.LAST
    if global_num_tokens is not None:
        set_dp_counts(fb, global_num_tokens)
    return fb


def draft_extend_v2_batch(bs: int, num_tokens_per_req: int, *, global_num_tokens=None):
    """The DRAFT_EXTEND_V2 batch prepare_for_draft_extend builds: every
    request extends ``num_tokens_per_req`` (= num_draft_tokens) rows."""
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    n = bs * num_tokens_per_req
    spec = EagleDraftExtendInput(
        hidden_states=torch.zeros(n, HIDDEN),
        num_correct_drafts=torch.zeros(bs, dtype=torch.int64),
        num_accept_tokens=torch.ones(bs, dtype=torch.int64),
        num_tokens_per_req=num_tokens_per_req,
        num_tokens_for_logprob_per_req=num_tokens_per_req,
    )
    prefix = [5] * bs
    fb = ForwardBatch(
        forward_mode=ForwardMode.DRAFT_EXTEND_V2,
        batch_size=bs,
        input_ids=torch.arange(n, dtype=torch.int64) % 7,
        req_pool_indices=torch.arange(bs, dtype=torch.int64),
        seq_lens=torch.tensor([p + num_tokens_per_req for p in prefix]),
        out_cache_loc=torch.arange(n, dtype=torch.int64),
        seq_lens_sum=sum(prefix) + n,
        seq_lens_cpu=torch.tensor([p + num_tokens_per_req for p in prefix]),
        positions=torch.arange(n, dtype=torch.int64),
        extend_num_tokens=n,
        extend_seq_lens=torch.full((bs,), num_tokens_per_req, dtype=torch.int32),
        extend_prefix_lens=torch.tensor(prefix, dtype=torch.int32),
        extend_start_loc=torch.arange(bs, dtype=torch.int32) * num_tokens_per_req,
        extend_seq_lens_cpu=[num_tokens_per_req] * bs,
        extend_prefix_lens_cpu=list(prefix),
        extend_logprob_start_lens_cpu=[0] * bs,
        spec_info=spec,
        capture_hidden_mode=CaptureHiddenMode.FULL,
    )
    if global_num_tokens is not None:
        set_dp_counts(fb, global_num_tokens)
    return fb


def verify_batch(bs: int, draft_token_num: int = 4, *, global_num_tokens=None):
    """A TARGET_VERIFY batch as EagleVerifyInput.prepare_for_verify hands it
    to the target: bs * draft_token_num rows."""
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    n = bs * draft_token_num
    seq = torch.full((bs,), 9, dtype=torch.int64)
    spec = EagleVerifyInput(
        draft_token=torch.arange(n, dtype=torch.int64) % 7,
        custom_mask=torch.ones(n * 16, dtype=torch.bool),
        positions=torch.arange(n, dtype=torch.int64),
        retrieve_index=torch.arange(n, dtype=torch.int64).view(bs, draft_token_num),
        retrieve_next_token=torch.full((bs, draft_token_num), -1, dtype=torch.int64),
        retrieve_next_sibling=torch.full((bs, draft_token_num), -1, dtype=torch.int64),
        retrieve_cum_len=None,
        spec_steps=draft_token_num - 1,
        topk=1,
        draft_token_num=draft_token_num,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        seq_lens_sum=int(seq.sum()),
        seq_lens_cpu=seq.clone(),
    )
    fb = ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY,
        batch_size=bs,
        input_ids=spec.draft_token.clone(),
        req_pool_indices=torch.arange(bs, dtype=torch.int64),
        seq_lens=seq,
        out_cache_loc=torch.arange(n, dtype=torch.int64),
        seq_lens_sum=int(seq.sum()),
        seq_lens_cpu=seq.clone(),
        positions=spec.positions.clone(),
        spec_info=spec,
        capture_hidden_mode=CaptureHiddenMode.FULL,
    )
    if global_num_tokens is not None:
        set_dp_counts(fb, global_num_tokens)
    return fb


def idle_draft_batch(*, global_num_tokens=None):
    """An IDLE DP rank's draft batch (EagleDraftInput.create_idle_input)."""
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    spec = EagleDraftInput.create_idle_input(
        device=torch.device("cpu"),
        hidden_size=HIDDEN,
        dtype=torch.float32,
        topk=1,
        capture_hidden_mode=CaptureHiddenMode.LAST,
    )
    spec.num_tokens_per_req = 1
    spec.num_tokens_for_logprob_per_req = 1
    e = torch.empty(0, dtype=torch.int64)
    fb = ForwardBatch(
        forward_mode=ForwardMode.IDLE,
        batch_size=0,
        input_ids=e.clone(),
        req_pool_indices=e.clone(),
        seq_lens=e.clone(),
        out_cache_loc=e.clone(),
        seq_lens_sum=0,
        seq_lens_cpu=e.clone(),
        positions=e.clone(),
        spec_info=spec,
    )
    if global_num_tokens is not None:
        set_dp_counts(fb, global_num_tokens)
    return fb


# ---------------------------------------------------------------------------
# EAGLE draft worker stand-in: the attributes EagleDraftWorker.draft_forward
# reads (the method itself is SGLang's, called unbound on this object).
# ---------------------------------------------------------------------------


def eagle_draft_worker(draft_runner, draft_attn_backend, *, steps=3, topk=1):
    """A stand-in EAGLE draft worker whose draft_forward / _draft_forward_idle
    ARE EagleDraftWorker's (eagle_worker_v2.py), bound to a minimal object."""
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

    cls = type(
        "EagleDraftWorkerStandIn",
        (),
        {
            "draft_forward": EagleDraftWorker.draft_forward,
            "_draft_forward_idle": EagleDraftWorker._draft_forward_idle,
        },
    )
    w = cls()
    w.__dict__.update(
        topk=topk,
        speculative_num_steps=steps,
        hot_token_id=None,
        _topk1_parents_prealloc=torch.zeros(64, steps, dtype=torch.int64),
        _topk1_score_indices_prealloc=torch.zeros(64, steps, dtype=torch.int64),
        index_share_for_mtp_iteration=False,
        seed_dsa_topk_from_draft_extend=False,
        draft_runner=draft_runner,
        draft_attn_backend=draft_attn_backend,
    )
    return w


def summary(**extra):
    """Small JSON-able result: launches (backend, shape, planned, stale)."""
    out = dict(
        launches=[
            [d["backend"], d["kind"], d["layer"], d["shape"], d["planned"], d["stale"]]
            for d in LAUNCH_LOG
        ],
        stale_launches=stale_launches(),
        attention_layer_calls=len(LAYER_CALLS),
    )
    out.update(extra)
    return out


def extend_batch(extend_lens, prefix_lens=None, *, global_num_tokens=None, is_extend=True):
    """A plain EXTEND batch (no spec_info)."""
    bs = len(extend_lens)
    prefix_lens = list(prefix_lens or [4] * bs)
    n = sum(extend_lens)
    seq = torch.tensor([p + e for p, e in zip(prefix_lens, extend_lens)])
    starts = [0]
    for e in extend_lens[:-1]:
        starts.append(starts[-1] + e)
    fb = ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=bs,
        input_ids=torch.arange(n, dtype=torch.int64) % 7,
        req_pool_indices=torch.arange(bs, dtype=torch.int64),
        seq_lens=seq,
        out_cache_loc=torch.arange(n, dtype=torch.int64),
        seq_lens_sum=int(seq.sum()),
        seq_lens_cpu=seq.clone(),
        orig_seq_lens=seq.clone(),
        positions=torch.cat(
            [torch.arange(p, p + e) for p, e in zip(prefix_lens, extend_lens)]
        ),
        extend_num_tokens=n,
        extend_seq_lens=torch.tensor(extend_lens, dtype=torch.int32),
        extend_prefix_lens=torch.tensor(prefix_lens, dtype=torch.int32),
        extend_start_loc=torch.tensor(starts, dtype=torch.int32),
        extend_seq_lens_cpu=list(extend_lens),
        extend_prefix_lens_cpu=list(prefix_lens),
        extend_logprob_start_lens_cpu=[0] * bs,
    )
    if global_num_tokens is not None:
        set_dp_counts(fb, global_num_tokens, is_extend=is_extend)
    return fb


class CpuSharedPlanWrapper(_CpuKernels, AttentionBackend):
    """A wrapper backend (the runner's attn_backend) that plans once and
    shares the plan object with its child by assignment -- the child's own
    init_forward_metadata is never called. Kernels run through the child."""

    def __init__(self, name="wrapper"):
        self.name = name
        self.forward_metadata = None
        self.plans = []
        self.child = CpuPlannedBackend(name=f"{name}.child")

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        bs, n = _shape(forward_batch)
        plan = SimpleNamespace(bs=bs, num_tokens=n)
        self.forward_metadata = plan
        self.child.forward_metadata = plan
        self.plans.append([bs, n])

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kw):
        return self.child.forward_decode(q, k, v, layer, forward_batch, save_kv_cache, **kw)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kw):
        return self.child.forward_extend(q, k, v, layer, forward_batch, save_kv_cache, **kw)


@contextlib.contextmanager
def eager_input_no_copy():
    """SGLANG_EAGER_INPUT_NO_COPY=1: EagerRunner.load_batch returns
    dataclasses.replace(forward_batch) instead of the registry view."""
    key = "SGLANG_EAGER_INPUT_NO_COPY"
    old = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old
