"""ModelRunner subclass with the fork's pre-planned forward entry points.

The spec workers call these when they have already planned attention metadata
(plan stream overlap) and want the runner to reuse it.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils.common import require_mlp_sync

logger = logging.getLogger(__name__)


class ForkModelRunner(ModelRunner):
    @functools.cached_property
    def _preplan_allowed(self) -> bool:
        # Pre-planning outside forward is only safe when no MLP-sync padding
        # can reshape the batch afterwards.
        return not require_mlp_sync()

    def _pin_plan(self, forward_batch: ForwardBatch) -> None:
        # Multi-step wrapper plans must never be clobbered by the forward
        # path's own init_forward_metadata.
        forward_batch.forward_metadata_replan_equivalent = False

    def _run_model(self, forward_batch: ForwardBatch):
        return self.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )

    # expect: SG106
    def forward_preplanned(
        self, forward_batch: ForwardBatch, attn_backend: Optional[Any] = None
    ):
        backend = attn_backend or self.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        ret = self.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: clean
    def forward_preplanned_padded_first(
        self, forward_batch: ForwardBatch, attn_backend: Optional[Any] = None
    ):
        backend = attn_backend or self.attn_backend
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        ret = self.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: clean
    def forward_replan_after_pad(self, forward_batch: ForwardBatch):
        # Early plan overlaps the host work with the previous step; after the
        # padding we plan again on the final shapes before running the model.
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._prepare_eager_forward_batch(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        ret = self._run_model(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: SG106
    def forward_check_then_model(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._prepare_eager_forward_batch(forward_batch)
        if forward_batch.needs_forward_metadata_init():
            self.attn_backend.init_forward_metadata(forward_batch)
        ret = self._run_model(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: clean
    def forward_check_then_model_replan(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self._prepare_eager_forward_batch(forward_batch)
        if forward_batch.needs_forward_metadata_init():
            self.attn_backend.init_forward_metadata(forward_batch)
        ret = self._run_model(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: SG106
    def forward_pinned(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self._pin_plan(forward_batch)
        return self.forward(forward_batch)

    # expect: SG106
    def forward_remarked(self, forward_batch: ForwardBatch, spec_info=None):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if spec_info is not None:
            # The draft tail changed the tree: plan again with it.
            forward_batch.spec_info = spec_info
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch)

    # expect: clean
    def forward_preplanned_if_allowed(self, forward_batch: ForwardBatch):
        graph = self.decode_cuda_graph_runner
        replays = bool(graph and graph.can_run_graph(forward_batch))
        if (
            self._preplan_allowed
            and not replays
            and not forward_batch.forward_mode.is_idle()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch)
