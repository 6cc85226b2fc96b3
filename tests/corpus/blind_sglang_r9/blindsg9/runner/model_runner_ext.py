"""Model-runner / eager-runner hooks used by the fork's offline planner.

The offline planner plans attention metadata for a batch before handing it to
the runner, so that planning overlaps the previous step's sampling.
"""

from __future__ import annotations

import logging
from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.model_executor.runner.eager_runner import EagerRunner

logger = logging.getLogger(__name__)


class PrePlanModelRunner(ModelRunner):
    # expect: SG106
    def forward_preplanned(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: clean
    def forward_replannable(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        self.attn_backend.init_forward_metadata(forward_batch)
        # The runner's own init is equivalent (same backend object), so let
        # it re-plan when prepare_mlp_sync_batch reshapes the batch.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: SG106
    def _run_eager_after_plan(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # DP / MLP-sync padding + attn-tp normalization, as _forward_raw does.
        self._prepare_eager_forward_batch(forward_batch)
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: clean
    def _run_eager_pad_then_plan(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        # Pad first so the plan describes the batch the kernels will see.
        self._prepare_eager_forward_batch(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: clean
    def forward_graph_preplanned(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        graph_runner = self.decode_cuda_graph_runner
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            # load_batch pads into the static buffers and plans the replay
            # metadata for the padded graph batch.
            graph_runner.load_batch(forward_batch, pp_proxy_tensors)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: clean
    def forward_plan_hint(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        # Warm the backend's host-side buffers; the forward still plans for
        # the batch it runs (no readiness mark).
        self.attn_backend.init_forward_metadata(forward_batch)
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)


class ForkEagerRunner(EagerRunner):
    # expect: SG106
    def execute_preplanned(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        model_runner = self.model_runner
        if forward_batch.forward_mode.is_decode():
            model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(model_runner)
        return self.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)


class DPSafeEagerRunner(EagerRunner):
    # expect: clean
    def execute_preplanned(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        model_runner = self.model_runner
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(model_runner)
        if forward_batch.forward_mode.is_decode():
            # Planned on the padded batch: the marker records padded shapes.
            model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
