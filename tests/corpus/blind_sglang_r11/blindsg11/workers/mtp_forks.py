"""MTP draft worker: per-algorithm pre-plan policies for the draft extend.

The scheduler mixin builds the DRAFT_EXTEND_V2 ForwardBatch (unplanned) and
hands it to one of the entry points below.
"""

from __future__ import annotations

import logging
import time

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_spec
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import require_mlp_sync

from blindsg11.runtime.step_policy import NO_PREPLAN, PrePlanRegistry

logger = logging.getLogger(__name__)


class MtpDraftWorker(EagleDraftWorker):
    def configure_preplan(self) -> None:
        hf_config = self.draft_runner.model_config.hf_config
        is_dsa = getattr(hf_config, "index_topk", None) is not None
        if is_dsa:
            self._algo_key = "dsa_mtp"
        elif get_spec().speculative_algorithm == "STANDALONE":
            self._algo_key = "standalone"
        else:
            self._algo_key = "eagle"
        self._plan_failures = 0

    # expect: SG106
    def draft_extend_with_policy(self, forward_batch: ForwardBatch):
        policy = PrePlanRegistry.for_algorithm(self._algo_key)
        policy.apply(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_policy_dp_safe(self, forward_batch: ForwardBatch):
        # Under MLP sync the runner pads the batch itself; pre-planning would
        # only be thrown away (or, for DSA, be kept stale), so skip it there.
        policy = (
            NO_PREPLAN
            if require_mlp_sync()
            else PrePlanRegistry.for_algorithm(self._algo_key)
        )
        policy.apply(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def run_draft_extend_try(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        tic = time.perf_counter()
        try:
            if not forward_batch.forward_mode.is_idle():
                backend.init_forward_metadata(forward_batch)
        except NotImplementedError:
            # Backends without an out-of-forward plan (e.g. some NPU kernels)
            # fall back to the runner's own init.
            self._plan_failures += 1
        else:
            forward_batch.mark_forward_metadata_ready()
        finally:
            logger.debug("draft extend pre-plan took %.3f ms", (time.perf_counter() - tic) * 1e3)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_draft_extend_try_replan(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        tic = time.perf_counter()
        try:
            if not forward_batch.forward_mode.is_idle():
                backend.init_forward_metadata(forward_batch)
        except NotImplementedError:
            self._plan_failures += 1
        else:
            # Same backend object the runner would plan with, so a post-pad
            # re-plan is equivalent.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        finally:
            logger.debug("draft extend pre-plan took %.3f ms", (time.perf_counter() - tic) * 1e3)
        return self.draft_runner.forward(forward_batch).logits_output
