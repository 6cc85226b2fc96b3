"""Weight-sync hooks run by the trainer between rollout steps.

After a policy broadcast the draft / target runners are probed with one warm
forward on a held-back batch so the first real rollout step does not pay for
lazy re-initialisation (FlashInfer plan caches, fp8 scales, ...).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)

from blindsg31.rollout.batch_ops import runner_can_replay

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.tp_worker import TpModelWorker

logger = logging.getLogger(__name__)


def _warm_batch(batch: "ScheduleBatch", runner) -> ForwardBatch:
    return ForwardBatch.init_new(
        batch,
        runner,
        capture_hidden_mode=CaptureHiddenMode.LAST,
        return_hidden_states_before_norm=False,
    )


class DraftWeightSync:
    """Re-arms the EAGLE draft runner after the draft head is re-loaded."""

    def __init__(self, reload_fn=None):
        self.reload_fn = reload_fn
        self.num_syncs = 0

    # idiom: model_executor/model_runner.py ModelRunner.forward(skip_attn_backend_init=True) (0.5.6 form); plans the warm draft batch, forwards with the deprecated skip flag
    # expect: SG106
    def after_update(self, worker: Any, warm_batch: "ScheduleBatch"):
        self.num_syncs += 1
        if self.reload_fn is not None:
            self.reload_fn(worker.draft_runner)
        forward_batch = _warm_batch(warm_batch, worker.draft_runner)
        worker.draft_attn_backend.init_forward_metadata(forward_batch)
        return worker.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        )

    # idiom: model_executor/model_runner.py ModelRunner.forward(skip_attn_backend_init=False) (0.5.6 form); plans the warm batch, forward still plans after padding
    # expect: clean
    def after_update_eager(self, worker: Any, warm_batch: "ScheduleBatch"):
        self.num_syncs += 1
        if self.reload_fn is not None:
            self.reload_fn(worker.draft_runner)
        forward_batch = _warm_batch(warm_batch, worker.draft_runner)
        # Warm the plan cache only; the forward builds the metadata it runs.
        worker.draft_attn_backend.init_forward_metadata(forward_batch)
        return worker.draft_runner.forward(
            forward_batch, skip_attn_backend_init=False
        )


class TargetWeightSync:
    """Probes the target TpModelWorker after a policy broadcast."""

    def __init__(self, forward_kwargs: Dict[str, Any] = None):
        self.forward_kwargs = dict(forward_kwargs or {})

    # idiom: managers/tp_worker.py TpModelWorker.forward_batch_generation(skip_attn_backend_init=True); plans the DECODE probe batch, passes the skip flag through a kwargs dict
    # expect: SG106
    def refresh_and_probe(self, tp_worker: "TpModelWorker", probe_batch: "ScheduleBatch"):
        runner = tp_worker.model_runner
        forward_batch = _warm_batch(probe_batch, runner)
        fwd_kwargs = dict(self.forward_kwargs)
        if not runner_can_replay(runner, forward_batch):
            runner.attn_backend.init_forward_metadata(forward_batch)
            fwd_kwargs["skip_attn_backend_init"] = True
        return tp_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch, **fwd_kwargs
        )

    # idiom: managers/tp_worker.py TpModelWorker.forward_batch_generation(is_verify=True); plans the TARGET_VERIFY probe, skip flag, verify is re-planned by the eager extend
    # expect: clean
    def refresh_and_probe_verify(
        self, tp_worker: "TpModelWorker", verify_forward_batch: ForwardBatch
    ):
        runner = tp_worker.model_runner
        assert verify_forward_batch.forward_mode.is_target_verify()
        fwd_kwargs = dict(self.forward_kwargs)
        if not runner_can_replay(runner, verify_forward_batch):
            runner.attn_backend.init_forward_metadata(verify_forward_batch)
            fwd_kwargs["skip_attn_backend_init"] = True
        return tp_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            **fwd_kwargs,
        )

    # idiom: managers/tp_worker.py TpModelWorker.forward_batch_generation(skip_attn_backend_init=True); raises under DP attention before the pre-planned probe
    # expect: clean
    def refresh_single_dp(self, tp_worker: "TpModelWorker", probe_batch: "ScheduleBatch"):
        if is_dp_attention_enabled():
            raise RuntimeError(
                "pre-planned weight-sync probe is unsupported with DP attention; "
                "use refresh_and_probe_verify or disable the probe"
            )
        runner = tp_worker.model_runner
        forward_batch = _warm_batch(probe_batch, runner)
        if not runner_can_replay(runner, forward_batch):
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return tp_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        )
