"""ModelRunner with host-side pre-planning entry points.

Used by the fork's offline batch driver, which plans attention metadata on
the host while the previous step's kernels drain, then launches the forward.
"""

from __future__ import annotations

import logging
from typing import Optional

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput

logger = logging.getLogger(__name__)


class PreplannedModelRunner(ModelRunner):
    def _will_replay_decode_graph(self, forward_batch: ForwardBatch) -> bool:
        graph_runner = self.decode_cuda_graph_runner
        return bool(
            forward_batch.forward_mode.is_cuda_graph()
            and graph_runner is not None
            and graph_runner.can_run_graph(forward_batch)
        )

    # expect: SG106
    def forward_preplanned(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        """Plan on the host, then forward without a second plan."""
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: clean
    def forward_preplanned_replannable(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        """Like :meth:`forward_preplanned`, but the plan was made on this
        runner's own backend, so the forward may redo it when the DP padding
        changes the batch's shape. A batch that will replay the decode graph
        is left to the graph runner's own replay preparation."""
        if self._will_replay_decode_graph(forward_batch):
            return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: SG106
    def forward_with_legacy_skip(
        self, forward_batch: ForwardBatch, planned: bool = False
    ) -> ModelRunnerOutput:
        """Entry point kept for the pre-marker driver, which passes
        ``planned=True`` when it already planned on its side stream."""
        if not planned:
            self.attn_backend.init_forward_metadata(forward_batch)
        return self.forward(forward_batch, skip_attn_backend_init=True)

    # expect: clean
    def forward_with_conditional_skip(
        self, forward_batch: ForwardBatch
    ) -> ModelRunnerOutput:
        if self._will_replay_decode_graph(forward_batch):
            return self.forward(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        # The host plan is only trusted when no MLP-sync padding will reshape
        # the batch inside forward(); otherwise let forward() plan again.
        skip = forward_batch.global_num_tokens_cpu is None
        return self.forward(forward_batch, skip_attn_backend_init=skip)

    # expect: SG106
    def forward_decode_manual(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        """Eager decode without the runner dispatch (no graph, no eager
        runner static buffers): used by the step-level profiler."""
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.forward_metadata_ready = True

        self._prepare_eager_forward_batch(forward_batch)
        if forward_batch.needs_forward_metadata_init():
            self.attn_backend.init_forward_metadata(forward_batch)

        with forward_context(
            ForwardContext(attn_backend=self.attn_backend),
            forward_batch=forward_batch,
        ):
            ret = self.model.forward(
                forward_batch.input_ids, forward_batch.positions, forward_batch
            )
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: clean
    def forward_decode_manual_prepadded(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        """Profiler decode path that pads before it plans."""
        self._prepare_eager_forward_batch(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        with forward_context(
            ForwardContext(attn_backend=self.attn_backend),
            forward_batch=forward_batch,
        ):
            ret = self.model.forward(
                forward_batch.input_ids, forward_batch.positions, forward_batch
            )
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: clean
    def forward_split_prefill_preplanned(
        self, forward_batch: ForwardBatch, forward_count: int = 1
    ) -> ModelRunnerOutput:
        """PD-multiplexing split prefill: the first chunk is planned early so
        its wrapper workspace is warm; the forward re-inits it after padding."""
        assert forward_batch.forward_mode.is_split_prefill()
        if forward_batch.split_index == 0:
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(
            forward_batch,
            reinit_attn_backend=True,
            split_forward_count=forward_count,
        )
