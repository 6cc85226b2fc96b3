"""Forward-mode keyed pre-planning: ``match`` dispatch and a handler registry."""

from __future__ import annotations

from typing import Any

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg40.config.settings import ParallelSettings
from blindsg40.registry.core import MODE_HANDLERS, register_mode_handler


@register_mode_handler(ForwardMode.DRAFT_EXTEND_V2)
class DraftExtendPrePlan:
    def prepare(self, attn_backend: Any, forward_batch: ForwardBatch) -> None:
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()


@register_mode_handler(ForwardMode.TARGET_VERIFY)
class VerifyPrePlan:
    def prepare(self, attn_backend: Any, forward_batch: ForwardBatch) -> None:
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()


class ModeDispatcher:
    def __init__(self, model_runner: Any, parallel: ParallelSettings, graph_runner: Any = None):
        self.model_runner = model_runner
        self.parallel = parallel
        self.graph_runner = graph_runner

    @classmethod
    def from_server_args(cls, server_args, model_runner, graph_runner=None):
        return cls(model_runner, ParallelSettings.from_server_args(server_args), graph_runner)

    def _preplan(self, forward_batch: ForwardBatch) -> None:
        backend = self.model_runner.attn_backend
        match forward_batch.forward_mode:
            case ForwardMode.DECODE | ForwardMode.DRAFT_EXTEND_V2:
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            case ForwardMode.IDLE:
                pass
            case _:
                backend.init_forward_metadata(forward_batch)

    # expect: SG106
    def dispatch_draft(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode not in (ForwardMode.DECODE, ForwardMode.DRAFT_EXTEND_V2):
            raise ValueError(f"not a draft mode: {forward_batch.forward_mode}")
        self._preplan(forward_batch)
        return self.model_runner.forward(forward_batch).logits_output

    # expect: clean
    def dispatch_draft_dp_aware(self, forward_batch: ForwardBatch):
        backend = self.model_runner.attn_backend
        match forward_batch.forward_mode:
            case ForwardMode.DECODE | ForwardMode.DRAFT_EXTEND_V2 if not self.parallel.enable_dp_attention:
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            case ForwardMode.DECODE | ForwardMode.DRAFT_EXTEND_V2:
                pass
            case _:
                raise ValueError(f"not a draft mode: {forward_batch.forward_mode}")
        return self.model_runner.forward(forward_batch).logits_output

    # expect: SG106
    def run_draft_extend(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        handler = MODE_HANDLERS.get(forward_batch.forward_mode)()
        handler.prepare(self.model_runner.attn_backend, forward_batch)
        return self.model_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_verify(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.TARGET_VERIFY
        graph = self.graph_runner
        if graph is not None and graph.can_run_graph(forward_batch):
            graph.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return self.model_runner.forward(forward_batch).logits_output
        handler = MODE_HANDLERS.get(forward_batch.forward_mode)()
        handler.prepare(self.model_runner.attn_backend, forward_batch)
        return self.model_runner.forward(forward_batch).logits_output
