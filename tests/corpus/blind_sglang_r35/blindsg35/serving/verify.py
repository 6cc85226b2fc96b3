"""Target-verify pipeline for the storefront fork."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Tuple

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)

from blindsg35.serving.config import SpecServingConfig

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

logger = logging.getLogger(__name__)


class VerifyPipeline:
    def __init__(self, target_worker: "TpModelWorker", cfg: SpecServingConfig):
        self.target_worker = target_worker
        self.target_runner = target_worker.model_runner
        self.cfg = cfg

    @property
    def target_attn_backend(self):
        return self.target_runner.attn_backend

    @property
    def graph_runner(self):
        return self.target_runner.decode_cuda_graph_runner

    def _build_verify_batch(
        self, batch: "ScheduleBatch", verify_input: "EagleVerifyInput"
    ) -> Tuple[ForwardBatch, bool]:
        batch.spec_info = verify_input
        batch.input_ids = verify_input.draft_token
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
        )
        verify_forward_batch = ForwardBatch.init_new(
            batch,
            self.target_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
            kv_loc_plan=verify_input.kv_loc_plan,
        )
        can_run_graph = bool(
            self.graph_runner and self.graph_runner.can_run_graph(verify_forward_batch)
        )
        return verify_forward_batch, can_run_graph

    def _forward(self, verify_forward_batch: ForwardBatch):
        return self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True
        )

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify
    # expect: clean
    def verify_eager_marked(self, batch: "ScheduleBatch", verify_input: "EagleVerifyInput"):
        verify_forward_batch, can_run_graph = self._build_verify_batch(batch, verify_input)
        if can_run_graph:
            self.graph_runner.load_batch(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
        elif not verify_forward_batch.forward_mode.is_idle():
            # Plan early on the target backend to overlap with the draft tail.
            # The eager runner re-plans TARGET_VERIFY from the final (padded)
            # batch regardless of the mark.
            self.target_attn_backend.init_forward_metadata(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
        return self._forward(verify_forward_batch)

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify
    # expect: SG106
    def verify_then_collapse(self, batch: "ScheduleBatch", verify_input: "EagleVerifyInput"):
        verify_forward_batch, can_run_graph = self._build_verify_batch(batch, verify_input)
        if can_run_graph:
            self.graph_runner.load_batch(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
            return self._forward(verify_forward_batch)
        if not verify_forward_batch.forward_mode.is_idle():
            self.target_attn_backend.init_forward_metadata(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
            # Eager fleets: a one-token verify window is a plain decode step;
            # relabel it so the decode kernels serve it.
            if self.cfg.disable_cuda_graph and self.cfg.num_draft_tokens == 1:
                verify_forward_batch.forward_mode = ForwardMode.DECODE
        return self._forward(verify_forward_batch)

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify
    # expect: clean
    def verify_collapsed_before_plan(
        self, batch: "ScheduleBatch", verify_input: "EagleVerifyInput"
    ):
        verify_forward_batch, can_run_graph = self._build_verify_batch(batch, verify_input)
        if can_run_graph:
            self.graph_runner.load_batch(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
            return self._forward(verify_forward_batch)
        if (
            not verify_forward_batch.forward_mode.is_idle()
            and self.cfg.disable_cuda_graph
            and self.cfg.num_draft_tokens == 1
        ):
            verify_forward_batch.forward_mode = ForwardMode.DECODE
        # Non-graph: nothing planned here; the forward plans after padding.
        return self._forward(verify_forward_batch)

    # idiom: sglang/srt/speculative/eagle_worker_common.py run_eagle_verify (metadata_ready_pre_pad)
    # expect: clean
    def verify_multi_layer(
        self,
        batch: "ScheduleBatch",
        verify_input: "EagleVerifyInput",
        metadata_ready_pre_pad: bool = True,
    ):
        verify_forward_batch, can_run_graph = self._build_verify_batch(batch, verify_input)
        if can_run_graph:
            self.graph_runner.load_batch(verify_forward_batch)
        if metadata_ready_pre_pad and (
            can_run_graph or verify_forward_batch.forward_mode.is_target_verify()
        ):
            # Multi-layer eagle keeps the upstream behaviour: marked on both
            # paths.  The eager extend path re-plans TARGET_VERIFY anyway.
            verify_forward_batch.mark_forward_metadata_ready()
        return self._forward(verify_forward_batch)
