"""Worker-level entry points that hand the ModelRunner a pre-planned batch."""

from __future__ import annotations

import logging

from sglang.srt.layers.attention.flashinfer_backend import DecodeMetadata
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_server_args
from sglang.srt.utils.common import require_mlp_sync

from blindsg8.spec._plan import (
    no_dp_padding_expected,
    pad_for_mlp_sync,
    plan_and_mark,
    preplanned,
)

logger = logging.getLogger(__name__)


# expect: SG106
def run_decode_with_preplan(model_runner: ModelRunner, forward_batch: ForwardBatch):
    """Plan on the scheduler thread, run on the forward thread."""
    if forward_batch.forward_mode.is_decode():
        plan_and_mark(model_runner.attn_backend, forward_batch)
    return model_runner.forward(forward_batch).logits_output


# expect: clean
def run_decode_with_guarded_preplan(
    model_runner: ModelRunner, forward_batch: ForwardBatch
):
    """As above, but only keep the pre-plan when no DP padding follows."""
    if forward_batch.forward_mode.is_decode():
        if no_dp_padding_expected(forward_batch):
            plan_and_mark(model_runner.attn_backend, forward_batch)
        else:
            model_runner.attn_backend.init_forward_metadata(forward_batch)
    return model_runner.forward(forward_batch).logits_output


# expect: SG106
def forward_with_preplanned_ctx(model_runner: ModelRunner, forward_batch: ForwardBatch):
    with preplanned(model_runner.attn_backend, forward_batch) as fb:
        out = model_runner.forward(fb)
    return out.logits_output


# expect: clean
def forward_with_cleared_mark(model_runner: ModelRunner, forward_batch: ForwardBatch):
    plan_and_mark(model_runner.attn_backend, forward_batch)
    if require_mlp_sync():
        # ModelRunner pads for the MLP sync; let it plan the padded batch.
        forward_batch.forward_metadata_ready = False
    return model_runner.forward(forward_batch).logits_output


class PrePlannedTpModelWorker(TpModelWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # We plan in `forward_preplanned`, so the runner must not plan again.
        self.skip_attn_init_after_plan = True

    # expect: SG106
    def forward_preplanned(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        out = self.model_runner.forward(
            forward_batch, skip_attn_backend_init=self.skip_attn_init_after_plan
        )
        return out.logits_output, out.can_run_graph


class DPAwarePrePlannedTpModelWorker(TpModelWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # With DP attention the runner pads after us and must re-plan.
        self.skip_attn_init_after_plan = not get_server_args().enable_dp_attention

    # expect: clean
    def forward_preplanned(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        out = self.model_runner.forward(
            forward_batch, skip_attn_backend_init=self.skip_attn_init_after_plan
        )
        return out.logits_output, out.can_run_graph


class FlashInferPrePlanTpWorker(TpModelWorker):
    """Drives the FlashInfer decode wrappers' plan directly (skips the
    backend's SWA / cross-attention dispatch we don't use)."""

    def _plan_decode_wrappers(self, forward_batch: ForwardBatch) -> None:
        backend = self.model_runner.attn_backend
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
    def forward_decode_preplanned(self, forward_batch: ForwardBatch):
        self._plan_decode_wrappers(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.model_runner.forward(forward_batch).logits_output


class FlashInferPadFirstTpWorker(FlashInferPrePlanTpWorker):
    # expect: clean
    def forward_decode_preplanned(self, forward_batch: ForwardBatch):
        pad_for_mlp_sync(forward_batch, self.model_runner)
        self._plan_decode_wrappers(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.model_runner.forward(forward_batch).logits_output
