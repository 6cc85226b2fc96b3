"""FlashInfer's paged prefill wrapper as SGLang's CUDA-graph path uses it, on CPU: the wrapper's own buffers are
CPU tensors and only the compiled module (`_cached_module`, the device kernels' planner and launcher) is a
recording stand-in. SGLang installs its planner per instance, `begin_forward = partial(fast_prefill_plan, w)`."""

from __future__ import annotations

import functools

import torch
from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper as Prefill
from sglang.srt.layers.attention import flashinfer_backend

I32 = torch.int32


class Kernels:
    """Stands in for FlashInfer's compiled module: records calls, computes nothing."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def plan(self, *args: object) -> list[int]:
        self.calls.append("plan")
        return [0] * 16

    def __getattr__(self, name: str):  # paged_run and friends
        def launch(*args: object, **kwargs: object) -> None:
            self.calls.append(name)

        return launch


def graph_prefill_wrapper(bs: int, max_pages: int = 64) -> Prefill:
    """A wrapper captured for a CUDA graph of `bs` requests: its indptr buffers have that fixed size."""
    w = object.__new__(Prefill)
    w.__dict__.update(
        _backend="fa2",
        _kv_layout="NHD",
        _window_left=-1,
        _logits_soft_cap=0.0,
        _sm_scale=None,
        _rope_scale=None,
        _rope_theta=None,
        _trtllm_gen_multi_ctas_kv_counter_buffer=None,
        _kv_lens_buffer=None,
        _workspace_size=None,
        _mask_indptr_buf=None,
        _jit_module=None,
        _eagle_verify_fp8kv_sm90_state=None,
        _causal=None,
        _variant_owns_mask=None,
        _custom_mask_buf=None,
        _use_cuda_graph=True,
        _cached_module=Kernels(),
        _max_total_num_rows=None,
        device=torch.device("cpu"),
        _float_workspace_buffer=torch.empty(64, dtype=torch.uint8),
        _int_workspace_buffer=torch.empty(64, dtype=torch.uint8),
        _pin_memory_int_workspace_buffer=torch.empty(64, dtype=torch.uint8),
        _qo_indptr_buf=torch.zeros(bs + 1, dtype=I32),
        _paged_kv_indptr_buf=torch.zeros(bs + 1, dtype=I32),
        _paged_kv_last_page_len_buf=torch.zeros(bs, dtype=I32),
        _paged_kv_indices_buf=torch.zeros(max_pages, dtype=I32),
    )
    # what FlashInferAttnBackend does once a graph wrapper has been planned for capture
    w.begin_forward = functools.partial(flashinfer_backend.fast_prefill_plan, w)
    return w


def sglang_uses_fast_prefill_plan(w: Prefill) -> bool:
    """SGLang's own test of which planner a wrapper uses (FlashInferAttnBackend's call_begin_forward)."""
    return hasattr(w.begin_forward, "func") and w.begin_forward.func is flashinfer_backend.fast_prefill_plan


def plan_requests(w: Prefill, q_lens: list[int], kv_len: int = 16) -> None:
    """Plan `len(q_lens)` requests of those query lengths through the instance's planner, host layout given."""
    n = len(q_lens)
    qo = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=I32)
    kv_indptr = torch.arange(n + 1, dtype=I32)
    w.begin_forward(
        qo,
        kv_indptr,
        torch.arange(n, dtype=I32),
        torch.full((n,), kv_len, dtype=I32),
        4,
        4,
        64,
        kv_len,
        causal=True,
        q_data_type=torch.float16,
        qo_indptr_host=qo,
        kv_indptr_host=kv_indptr,
        kv_lens_host=torch.full((n,), kv_len, dtype=I32),
        max_q_len=max(q_lens),
        max_kv_len=kv_len,
    )


def launch(w: Prefill, rows: int) -> None:
    q = torch.randn(rows, 4, 64, dtype=torch.float16)
    kv = torch.zeros(4, 2, 16, 4, 64, dtype=torch.float16)
    w.run(q, kv, enable_pdl=False)
