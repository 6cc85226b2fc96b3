"""Lookahead (n-gram) verifier: the corpus proposes, the target verifies.

Subclasses SGLang's NGRAMWorker and only replaces the forward plumbing: the
plain-decode fallback (no corpus hit) and the verify forward pre-plan their
attention metadata so the planning cost overlaps the corpus lookup.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.ngram_worker import NGRAMWorker

from blindsg29.reliability import plan_utils
from blindsg29.reliability.planning_mixin import PrePlanMixin

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch

logger = logging.getLogger(__name__)


class LookaheadVerifierWorker(PrePlanMixin, NGRAMWorker):
    """``self.model_runner`` is the target runner (set by NGRAMWorker)."""

    def _new_forward_batch(self, batch: "ScheduleBatch") -> ForwardBatch:
        return ForwardBatch.init_new(
            batch, self.model_runner, return_hidden_states_before_norm=False
        )

    def _corpus_has_hits(self, batch: "ScheduleBatch") -> bool:
        # The scheduler-side lookup stamps the batch; default to verifying.
        return bool(getattr(batch, "lookahead_hits", True))

    # idiom: ngram_worker.NGRAMWorker.forward_batch_generation, overridden to dispatch between the lookahead paths with an idle early-exit
    # expect: clean
    def forward_batch_generation(
        self, batch: "ScheduleBatch", on_publish=None, pp_proxy_tensors=None
    ) -> GenerationBatchResult:
        if batch.forward_mode.is_idle() or not self.flags.lookahead_enabled:
            return super().forward_batch_generation(
                batch, on_publish=on_publish, pp_proxy_tensors=pp_proxy_tensors
            )
        if batch.forward_mode.is_extend() and not batch.forward_mode.is_target_verify():
            return self._target_worker.forward_batch_generation(
                batch, pp_proxy_tensors=pp_proxy_tensors
            )
        if batch.forward_mode.is_decode() and not self._corpus_has_hits(batch):
            plain = (
                self._plain_decode_preplanned
                if self.flags.lookahead_preplan_decode
                else self._plain_decode_replannable
            )
            return plain(batch)
        return super().forward_batch_generation(
            batch, on_publish=on_publish, pp_proxy_tensors=pp_proxy_tensors
        )

    # idiom: tp_worker.TpModelWorker.forward_batch_generation(forward_batch=...) fed a decode batch pre-planned and marked by the lookahead fallback
    # expect: SG106
    def _plain_decode_preplanned(self, batch: "ScheduleBatch") -> GenerationBatchResult:
        if batch.forward_mode.is_idle():
            return self._target_worker.forward_batch_generation(batch)
        forward_batch = self._new_forward_batch(batch)
        if self.flags.lookahead_preplan_decode and not self._graph_can_run(
            forward_batch
        ):
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._target_worker.forward_batch_generation(
            None, forward_batch=forward_batch
        )

    # idiom: tp_worker.TpModelWorker.forward_batch_generation(forward_batch=...) with the lookahead pre-plan marked replan_equivalent=True (same backend object)
    # expect: clean
    def _plain_decode_replannable(self, batch: "ScheduleBatch") -> GenerationBatchResult:
        if batch.forward_mode.is_idle():
            return self._target_worker.forward_batch_generation(batch)
        forward_batch = self._new_forward_batch(batch)
        if not self._graph_can_run(forward_batch):
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self._target_worker.forward_batch_generation(
            None, forward_batch=forward_batch
        )

    # idiom: eagle_utils verify pre-plan + mark (TARGET_VERIFY) handed to ModelRunner.forward when no decode graph replays; EagerRunner._execute_extend re-plans verify
    # expect: clean
    def _verify_preplanned(self, batch: "ScheduleBatch", pp_proxy_tensors=None):
        self._prepare_for_speculative_decoding(batch)
        if not batch.forward_mode.is_target_verify():
            return self._target_worker.forward_batch_generation(
                batch, pp_proxy_tensors=pp_proxy_tensors
            )
        forward_batch = self._new_forward_batch(batch)
        if not self._graph_can_run(forward_batch):
            # Overlap the verify plan with the corpus bookkeeping below.
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._update_ngram_corpus(batch)
        return self._target_worker.forward_batch_generation(
            None,
            forward_batch=forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
            is_verify=True,
        )

    # idiom: eagle_worker.EAGLEWorker.forward_draft_extend_after_decode (0.5.6: init_forward_metadata then forward(skip_attn_backend_init=True)), applied to the target prefill
    # expect: SG106
    def _prefill_preplanned(self, batch: "ScheduleBatch"):
        forward_batch = self._new_forward_batch(batch)
        if forward_batch.forward_mode.is_idle():
            return self.model_runner.forward(forward_batch).logits_output
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        out = self.model_runner.forward(forward_batch, skip_attn_backend_init=True)
        return out.logits_output

    # idiom: forward_batch_info.ForwardBatch.apply_deprecated_skip_attn_backend_init used directly as the mark after a decode pre-plan
    # expect: SG106
    def _decode_with_legacy_skip(self, batch: "ScheduleBatch"):
        forward_batch = self._new_forward_batch(batch)
        if plan_utils.is_idle_batch(forward_batch):
            return self.model_runner.forward(forward_batch).logits_output
        can_graph = self._graph_can_run(forward_batch)
        if not can_graph:
            self.planning_backend.init_forward_metadata(forward_batch)
            forward_batch.apply_deprecated_skip_attn_backend_init(True)
        return self.model_runner.forward(forward_batch).logits_output

    # idiom: eagle_worker.EAGLEWorker.forward_draft_extend_after_decode, with the legacy kwarg explicitly False so the runner still plans
    # expect: clean
    def _decode_with_legacy_noskip(self, batch: "ScheduleBatch"):
        forward_batch = self._new_forward_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            # Touch the backend early so its workspace is resident.
            self.planning_backend.init_forward_metadata(forward_batch)
        out = self.model_runner.forward(forward_batch, skip_attn_backend_init=False)
        return out.logits_output

    def _lookahead_probe(self, batch: "ScheduleBatch", chunks: int = 2):
        forward_batch = self._new_forward_batch(batch)
        views = plan_utils.split_microbatches(forward_batch, chunks)
        return plan_utils.run_microbatches_preplanned(self.model_runner, views)
