"""A draft-step facade composed of a planner, a padder and runners.

The parts are handed in through the constructor so that alternative
planners (multi-step, frozen-KV views) can be swapped without touching the
step logic.
"""

from __future__ import annotations

from typing import Any, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg40.config.settings import ParallelSettings, SpecSettings
from blindsg40.spec.components import (
    EagerModelRunner,
    ForwardingRunner,
    MetadataPlanner,
    MlpSyncPadder,
    graph_runner_can_run,
)


class DraftStepFacade:
    def __init__(
        self,
        planner: MetadataPlanner,
        padder: MlpSyncPadder,
        eager: EagerModelRunner,
        forwarding: ForwardingRunner,
        parallel: ParallelSettings,
        spec: SpecSettings,
        graph_runner: Optional[Any] = None,
    ):
        self.planner = planner
        self.padder = padder
        self.eager = eager
        self.forwarding = forwarding
        self.parallel = parallel
        self.spec = spec
        self.graph_runner = graph_runner

    @classmethod
    def from_server_args(cls, server_args, model_runner, attn_backend, graph_runner=None):
        return cls(
            planner=MetadataPlanner(attn_backend),
            padder=MlpSyncPadder(model_runner),
            eager=EagerModelRunner(model_runner),
            forwarding=ForwardingRunner(model_runner),
            parallel=ParallelSettings.from_server_args(server_args),
            spec=SpecSettings.from_server_args(server_args),
            graph_runner=graph_runner,
        )

    # expect: SG106
    def decode_step(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self.planner.plan(forward_batch)
        self.padder.pad(forward_batch)
        logits_output = self.eager.run(forward_batch)
        return self.padder.unpad(forward_batch, logits_output)

    # expect: clean
    def decode_step_padded_first(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self.padder.pad(forward_batch)
        self.planner.plan(forward_batch)
        logits_output = self.eager.run(forward_batch)
        return self.padder.unpad(forward_batch, logits_output)

    # expect: clean
    def decode_step_replannable(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self.planner.plan_replannable(forward_batch)
        return self.forwarding.run(forward_batch)

    # expect: SG106
    def decode_step_forwarded(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self.planner.plan(forward_batch)
        return self.forwarding.run(forward_batch)

    # expect: clean
    def decode_step_graph_or_eager(self, forward_batch: ForwardBatch):
        if graph_runner_can_run(self.graph_runner, forward_batch):
            self.graph_runner.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return self.graph_runner.execute(forward_batch)
        return self.forwarding.run(forward_batch)

    # expect: clean
    def decode_step_dp_aware(self, forward_batch: ForwardBatch):
        if not self.parallel.enable_dp_attention:
            self.planner.plan(forward_batch)
        else:
            self.planner.plan_only(forward_batch)
        return self.forwarding.run(forward_batch)

    # expect: clean
    def verify_step(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.TARGET_VERIFY
        if graph_runner_can_run(self.graph_runner, forward_batch):
            self.graph_runner.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return self.forwarding.run(forward_batch)
        self.planner.plan(forward_batch)
        return self.forwarding.run(forward_batch)

    # expect: SG106
    def draft_extend_step(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        if graph_runner_can_run(self.graph_runner, forward_batch):
            return self.graph_runner.execute(forward_batch)
        self.planner.plan(forward_batch)
        return self.forwarding.run(forward_batch)
