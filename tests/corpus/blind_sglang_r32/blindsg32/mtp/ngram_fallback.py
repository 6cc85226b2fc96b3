"""N-gram fallback drafter.

When the MTP head's acceptance collapses (long copy spans, code), proposals
come from an n-gram match over the request's own tokens instead. The target
verify is the same TARGET_VERIFY forward; the MTP head's KV cache is kept
warm with a plain EXTEND over the accepted tokens.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Sequence

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel

from blindsg32.common.settings import MTPDraftSettings
from blindsg32.mtp.contexts import draft_backend_scope
from blindsg32.mtp.plan_utils import logits_of, refresh_seq_lens_sum

logger = logging.getLogger(__name__)


class NgramFallbackDrafter:
    def __init__(
        self,
        settings: MTPDraftSettings,
        target_runner: Any,
        draft_runner: Optional[Any] = None,
    ):
        self.settings = settings
        self.window = settings.ngram_window
        self.num_draft_tokens = settings.num_draft_tokens
        self.target_runner = target_runner
        self.draft_runner = draft_runner

    @classmethod
    def from_settings(cls, settings: MTPDraftSettings, worker: Any) -> "NgramFallbackDrafter":
        return cls(settings, worker.target_worker.model_runner, worker.draft_runner)

    @staticmethod
    def match_ngram(tokens: Sequence[int], window: int, max_len: int) -> List[int]:
        if window <= 0 or len(tokens) <= window:
            return []
        key = list(tokens[-window:])
        for start in range(len(tokens) - window - 1, -1, -1):
            if list(tokens[start : start + window]) == key:
                return list(tokens[start + window : start + window + max_len])
        return []

    @staticmethod
    def _plan_marked(backend: Any, forward_batch: ForwardBatch) -> None:
        refresh_seq_lens_sum(forward_batch)
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    # idiom: speculative/ngram_worker.py NGRAMWorker.forward_batch_generation verify; TARGET_VERIFY batch planned and marked, target runner forwards (eager verify re-plans)
    # expect: clean
    def verify(self, verify_forward_batch: ForwardBatch) -> Any:
        assert verify_forward_batch.forward_mode.is_target_verify()
        self._plan_marked(self.target_runner.attn_backend, verify_forward_batch)
        return logits_of(self.target_runner.forward(verify_forward_batch))

    # idiom: speculative/eagle_worker_v2.py (0.5.6) verify via forward_batch_generation(skip_attn_backend_init=True); TARGET_VERIFY planned then forwarded with the deprecated skip flag
    # expect: clean
    def verify_legacy(self, verify_forward_batch: ForwardBatch) -> Any:
        if not verify_forward_batch.forward_mode.is_target_verify():
            raise ValueError("verify_legacy only runs TARGET_VERIFY batches")
        backend = self.target_runner.attn_backend
        backend.init_forward_metadata(verify_forward_batch)
        output = self.target_runner.forward(
            verify_forward_batch, skip_attn_backend_init=True
        )
        return logits_of(output)

    # idiom: speculative/eagle_worker_v2.py _draft_extend_for_prefill; EXTEND over accepted tokens planned+marked through the _plan_marked staticmethod, then draft runner forward
    # expect: SG106
    def extend_draft_cache(
        self, batch: Any, accepted_hidden: torch.Tensor
    ) -> Optional[Any]:
        if self.draft_runner is None:
            return None
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.EXTEND
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        forward_batch.spec_info.hidden_states = accepted_hidden
        if not forward_batch.forward_mode.is_idle():
            self._plan_marked(self.draft_runner.attn_backend, forward_batch)
        return logits_of(self.draft_runner.forward(forward_batch))

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; DP guard only falls back to an unplanned forward when allow_dp_preplan is off (env default on), else plans+marks the decode
    # expect: SG106
    def refresh_mtp_head(self, forward_batch: ForwardBatch) -> Any:
        assert forward_batch.forward_mode.is_decode_or_idle()
        backend = self.draft_runner.attn_backend
        if get_parallel().attn_dp_enabled and not self.settings.allow_dp_preplan:
            with draft_backend_scope(backend, forward_batch):
                return logits_of(self.draft_runner.forward(forward_batch))
        self._plan_marked(backend, forward_batch)
        with draft_backend_scope(backend, forward_batch):
            return logits_of(self.draft_runner.forward(forward_batch))
