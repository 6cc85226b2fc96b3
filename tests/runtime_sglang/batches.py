"""Real SGLang ForwardBatch objects on CPU tensors; DP-attention padding through SGLang's own
`_pad_inputs_to_size`, with the batch size set first as `prepare_mlp_sync_batch` sets it (its token counts come
from an all-gather across DP ranks, which a single CPU process has not got); attention launched through SGLang's
own `AttentionBackend.forward` on a backend whose kernels are CPU stand-ins."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

I64 = torch.int64


def forward_batch(mode: str, bs: int, tokens: int, *, seq_len: int = 16) -> ForwardBatch:
    """A batch of `bs` requests and `tokens` query tokens, every sequence `seq_len` long."""
    per_req = tokens // bs if bs else 0
    extend = mode in ("EXTEND", "DRAFT_EXTEND_V2", "TARGET_VERIFY")
    return ForwardBatch(
        forward_mode=getattr(ForwardMode, mode),
        batch_size=bs,
        input_ids=torch.arange(tokens, dtype=I64),
        req_pool_indices=torch.arange(bs, dtype=I64),
        seq_lens=torch.full((bs,), seq_len, dtype=I64),
        seq_lens_cpu=torch.full((bs,), seq_len, dtype=I64),
        out_cache_loc=torch.arange(tokens, dtype=I64),
        seq_lens_sum=bs * seq_len,
        positions=torch.arange(tokens, dtype=I64),
        extend_seq_lens=torch.full((bs,), per_req, dtype=I64) if extend else None,
        extend_seq_lens_cpu=[per_req] * bs if extend else None,
        extend_prefix_lens_cpu=[seq_len - per_req] * bs if extend else None,
    )


# What _pad_inputs_to_size asks the model runner for: the sequence length padded requests get.
MODEL_RUNNER = SimpleNamespace(
    attn_backend=SimpleNamespace(
        get_cuda_graph_seq_len_fill_value=lambda: 1,
        get_cpu_graph_seq_len_fill_value=lambda: 1,
    )
)


def dp_pad(batch: ForwardBatch, bs: int, tokens: int) -> ForwardBatch:
    """Pad the batch to the DP group's size, as prepare_mlp_sync_batch does: its batch size first, then
    every token- and request-indexed input through SGLang's `_pad_inputs_to_size`."""
    batch._original_batch_size = batch.batch_size
    batch.batch_size = bs
    batch._pad_inputs_to_size(MODEL_RUNNER, tokens, bs)
    return batch


class CpuBackend(AttentionBackend):
    """An attention backend whose plan is the shape it was planned for and whose kernels return zeros."""

    def __init__(self) -> None:
        self.planned: list[list[int]] = []

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        self.planned.append([forward_batch.batch_size, int(forward_batch.input_ids.shape[0])])

    def _kernel(
        self, q: torch.Tensor, k: object, v: object, layer: object, forward_batch: object, **kw: object
    ) -> torch.Tensor:
        return q.new_zeros(q.shape[0], layer.tp_q_head_num * layer.v_head_dim)

    forward_decode = _kernel
    forward_extend = _kernel


LAYER = SimpleNamespace(tp_q_head_num=2, v_head_dim=8, layer_id=0)


def launch(backend: AttentionBackend, batch: ForwardBatch, layers: int = 2) -> None:
    """`layers` attention layers of one forward, each through AttentionBackend.forward as RadixAttention calls it."""
    rows = int(batch.input_ids.shape[0])
    q, kv = torch.zeros(rows, 2, 8), torch.zeros(rows, 2, 8)
    for _ in range(layers):
        backend.forward(q, kv, kv, LAYER, batch)


def forward_decides(batch: ForwardBatch, backend: CpuBackend | None = None, *, replan_anyway: bool = False) -> list:
    """SGLang's eager forward: plan again when the batch needs it (the extend path also when `replan_anyway`, as it
    does for target verify), then run the attention layers. Returns the decision and what was planned."""
    backend = backend or CpuBackend()
    decision = batch.needs_forward_metadata_init()
    if decision or replan_anyway:
        backend.init_forward_metadata(batch)
    launch(backend, batch)
    return [decision, backend.planned]
