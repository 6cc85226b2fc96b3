"""Production patch: plan decode batches ahead of time on DP-attention workers.

Mixed into TpModelWorker. The plan stream builds the next decode batch's
attention metadata while the current step runs; these entry points then run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors

from blindsg30.utils import plan_helpers as ph

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


class DPPrefetchMixin:
    model_runner: "ModelRunner"

    def _graph_ok(self, forward_batch: ForwardBatch) -> bool:
        graph_runner = self.model_runner.decode_cuda_graph_runner
        return bool(graph_runner and graph_runner.can_run_graph(forward_batch))

    # idiom: managers/tp_worker.py forward_batch_generation fed a plan-stream batch; eager decode planned+marked before the worker forward
    # expect: SG106
    def forward_prefetched(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_decode() and not self._graph_ok(forward_batch):
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward_batch_generation(batch=None, forward_batch=forward_batch)

    # idiom: managers/tp_worker.py forward_batch_generation fed a plan-stream batch; same backend object, mark opts into replan_equivalent
    # expect: clean
    def forward_prefetched_replannable(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_decode() and not self._graph_ok(forward_batch):
            ph.preplan_replannable(self.model_runner, forward_batch)
        return self.forward_batch_generation(batch=None, forward_batch=forward_batch)

    # idiom: model_executor/model_runner.py _forward_raw hand-inlined; plan, prepare_mlp_sync_batch, then mark(replan_equivalent=True) records the padded shapes
    # expect: SG106
    def forward_hand_padded(
        self, forward_batch: ForwardBatch, pp_proxy_tensors: Optional[PPProxyTensors] = None
    ):
        mr = self.model_runner
        mr.attn_backend.init_forward_metadata(forward_batch)
        padded = forward_batch.global_num_tokens_cpu is not None
        if padded:
            forward_batch.prepare_mlp_sync_batch(mr)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        ret = mr.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if padded:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # idiom: model_executor/model_runner.py _forward_raw hand-inlined; the forward's own padding step runs first, plan+mark on the padded batch
    # expect: clean
    def forward_hand_padded_post_plan(
        self, forward_batch: ForwardBatch, pp_proxy_tensors: Optional[PPProxyTensors] = None
    ):
        mr = self.model_runner
        mr._prepare_eager_forward_batch(forward_batch)
        mr.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        ret = mr.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # idiom: model_executor/model_runner.py _forward_raw hand-inlined; plan+mark, then _prepare_eager_forward_batch pads, eager execute skips the plan
    # expect: SG106
    def forward_hand_padded_marked(self, forward_batch: ForwardBatch):
        mr = self.model_runner
        mr.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        mr._prepare_eager_forward_batch(forward_batch)
        ret = mr.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # idiom: model_executor/model_runner.py _forward_raw hand-inlined; pre-pad plan+mark kept, but the padded batch is planned again before execute
    # expect: clean
    def forward_replan_after_pad(self, forward_batch: ForwardBatch):
        mr = self.model_runner
        mr.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        mr._prepare_eager_forward_batch(forward_batch)
        mr.attn_backend.init_forward_metadata(forward_batch)
        ret = mr.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # idiom: model_executor/forward_batch_info.py needs_forward_metadata_init; replan_equivalent set exactly when the batch will be DP-padded
    # expect: clean
    def forward_dp_gate(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_decode() and not self._graph_ok(forward_batch):
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            else:
                forward_batch.mark_forward_metadata_ready()
        return self.forward_batch_generation(batch=None, forward_batch=forward_batch)

    # idiom: managers/tp_worker.py forward_batch_generation; plain hand-off with no pre-plan
    # expect: clean
    def forward_no_preplan(self, forward_batch: ForwardBatch):
        forward_batch.forward_metadata_ready = False
        return self.forward_batch_generation(batch=None, forward_batch=forward_batch)
