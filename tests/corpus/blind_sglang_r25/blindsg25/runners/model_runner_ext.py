"""ModelRunner subclasses with the fork's direct (pre-planned) forward entries.

These entries bypass the generic ``ModelRunner.forward`` bookkeeping (expert
recorders, canary, step spans) for the draft model and for the eager target
verify of the fork's tree speculator.
"""

from __future__ import annotations

import logging
from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class ForkDraftModelRunner(ModelRunner):
    """Draft-side ModelRunner."""

    def _run_model(self, forward_batch: ForwardBatch, attn_backend=None):
        backend = attn_backend if attn_backend is not None else self.attn_backend
        with forward_context(ForwardContext(attn_backend=backend), forward_batch=forward_batch):
            ret = self.model.forward(
                forward_batch.input_ids, forward_batch.positions, forward_batch
            )
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    def forward_draft_decode(self, forward_batch: ForwardBatch, attn_backend):
        # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (plan + ModelRunner.forward)
        # expect: SG106
        if not forward_batch.forward_mode.is_idle():
            attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with forward_context(ForwardContext(attn_backend=attn_backend), forward_batch=forward_batch):
            return self.forward(forward_batch).logits_output

    def _forward_eager_preplanned(self, forward_batch: ForwardBatch):
        # idiom: model_executor/model_runner.py ModelRunner._forward_raw + runner/eager_runner.py _execute_decode
        # expect: SG106
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # DP / MLP-sync padding, as _forward_raw does before the eager runner.
        self._prepare_eager_forward_batch(forward_batch)
        if forward_batch.needs_forward_metadata_init():
            self.attn_backend.init_forward_metadata(forward_batch)
        return self._run_model(forward_batch)

    def _forward_eager_padded_first(self, forward_batch: ForwardBatch):
        # idiom: model_executor/model_runner.py ModelRunner._forward_raw (pad, then plan)
        # expect: clean
        self._prepare_eager_forward_batch(forward_batch)
        if forward_batch.needs_forward_metadata_init():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._run_model(forward_batch)

    def _forward_eager_replan_equivalent(self, forward_batch: ForwardBatch):
        # idiom: model_executor/forward_batch_info.py needs_forward_metadata_init (replan_equivalent pre-plan)
        # expect: clean
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self._prepare_eager_forward_batch(forward_batch)
        if forward_batch.needs_forward_metadata_init():
            self.attn_backend.init_forward_metadata(forward_batch)
        return self._run_model(forward_batch)


class ForkTargetModelRunner(ModelRunner):
    """Target-side ModelRunner with a direct eager verify entry."""

    def forward_verify_prepadded(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ):
        # idiom: speculative/eagle_worker_common.py run_eagle_verify (metadata_ready_pre_pad) on a custom forward
        # expect: SG106
        assert forward_batch.forward_mode.is_target_verify()
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        if forward_batch.needs_forward_metadata_init():
            self.attn_backend.init_forward_metadata(forward_batch)
        with forward_context(
            ForwardContext(attn_backend=self.attn_backend), forward_batch=forward_batch
        ):
            ret = self.model.forward(
                forward_batch.input_ids,
                forward_batch.positions,
                forward_batch,
                **self._pp_kwargs(pp_proxy_tensors),
            )
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    def forward_verify_forced_replan(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ):
        # idiom: model_executor/runner/eager_runner.py EagerRunner._execute_extend (target verify always re-planned)
        # expect: clean
        assert forward_batch.forward_mode.is_target_verify()
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        # A verify mark never covers the final (padded) batch: re-plan it.
        if (
            forward_batch.needs_forward_metadata_init()
            or forward_batch.forward_mode.is_target_verify()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
        with forward_context(
            ForwardContext(attn_backend=self.attn_backend), forward_batch=forward_batch
        ):
            ret = self.model.forward(
                forward_batch.input_ids,
                forward_batch.positions,
                forward_batch,
                **self._pp_kwargs(pp_proxy_tensors),
            )
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    def forward_draft_extend_post_pad(self, forward_batch: ForwardBatch):
        # idiom: model_executor/model_runner.py ModelRunner._forward_raw -> eager_runner.execute (plan after padding)
        # expect: clean
        assert forward_batch.forward_mode.is_draft_extend_v2()
        self._prepare_eager_forward_batch(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        with forward_context(
            ForwardContext(attn_backend=self.attn_backend), forward_batch=forward_batch
        ):
            ret = self.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret
