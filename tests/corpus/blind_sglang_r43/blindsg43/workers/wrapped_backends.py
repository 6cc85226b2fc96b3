"""Draft passes on runners whose attention backend wraps other backends.

Two-batch overlap (``TboAttnBackend``), prefill/decode split
(``HybridAttnBackend``) and a bare FlashInfer decode backend whose wrappers
are planned directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.srt.layers.attention.flashinfer_backend import (
    DecodeMetadata,
    FlashInferAttnBackend,
)
from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.layers.attention.tbo_backend import TboAttnBackend
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


def _plan_flashinfer_decode(backend: FlashInferAttnBackend, forward_batch: ForwardBatch):
    backend.indices_updater_decode.update(
        forward_batch.seq_lens,
        forward_batch.seq_lens_cpu,
        forward_batch.seq_lens_sum,
        decode_wrappers=backend.decode_wrappers,
        encoder_lens=forward_batch.encoder_lens,
        spec_info=forward_batch.spec_info,
        fixed_split_size=backend.decode_split_tile_size,
        disable_split_kv=False,
        req_pool_indices=forward_batch.req_pool_indices,
        plan=forward_batch.kv_loc_plan,
    )
    backend.forward_metadata = DecodeMetadata(backend.decode_wrappers)


# expect: SG106
def preplan_tbo_draft_extend(
    draft_runner: "ModelRunner", forward_batch: ForwardBatch
) -> LogitsProcessorOutput:
    backend = draft_runner.attn_backend
    assert isinstance(backend, TboAttnBackend)
    assert forward_batch.forward_mode.is_draft_extend_v2()
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def preplan_tbo_draft_extend_local(
    draft_runner: "ModelRunner", forward_batch: ForwardBatch
) -> LogitsProcessorOutput:
    backend = draft_runner.attn_backend
    assert isinstance(backend, TboAttnBackend)
    assert forward_batch.forward_mode.is_draft_extend_v2()
    if forward_batch.global_num_tokens_cpu is None:
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


# expect: SG106
def preplan_hybrid_draft_extend(
    draft_runner: "ModelRunner", forward_batch: ForwardBatch
) -> LogitsProcessorOutput:
    backend = draft_runner.attn_backend
    assert isinstance(backend, HybridAttnBackend)
    assert forward_batch.forward_mode.is_draft_extend_v2()
    backend._select_backend(forward_batch.forward_mode).init_forward_metadata(
        forward_batch
    )
    forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def preplan_hybrid_draft_extend_child(
    draft_runner: "ModelRunner", forward_batch: ForwardBatch
) -> LogitsProcessorOutput:
    backend = draft_runner.attn_backend
    assert isinstance(backend, HybridAttnBackend)
    assert forward_batch.forward_mode.is_draft_extend_v2()
    backend._select_backend(forward_batch.forward_mode).init_forward_metadata(
        forward_batch
    )
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return draft_runner.forward(forward_batch).logits_output


# expect: SG106
def plan_decode_wrappers_and_forward(
    draft_runner: "ModelRunner", forward_batch: ForwardBatch
) -> LogitsProcessorOutput:
    backend = draft_runner.attn_backend
    assert isinstance(backend, FlashInferAttnBackend)
    assert forward_batch.forward_mode.is_decode()
    _plan_flashinfer_decode(backend, forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def plan_decode_wrappers_manual_forward(
    draft_runner: "ModelRunner", forward_batch: ForwardBatch
) -> LogitsProcessorOutput:
    backend = draft_runner.attn_backend
    assert isinstance(backend, FlashInferAttnBackend)
    assert forward_batch.forward_mode.is_decode()
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(draft_runner)
    _plan_flashinfer_decode(backend, forward_batch)
    with forward_context(
        ForwardContext(attn_backend=backend), forward_batch=forward_batch
    ):
        ret = draft_runner.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret
