"""Fork model runner with pre-planned eager paths."""
from __future__ import annotations

from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg2.plan_utils import plan_and_seal


class PreplanModelRunner(ModelRunner):
    """ModelRunner that lets callers plan attention metadata up front."""

    # expect: SG106
    def forward_preplanned(self, forward_batch: ForwardBatch, **kwargs):
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._prepare_eager_forward_batch(forward_batch)
        return self.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch, **kwargs
        )

    # expect: clean
    def forward_preplanned_postpad(self, forward_batch: ForwardBatch, **kwargs):
        self._prepare_eager_forward_batch(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
        return self.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch, **kwargs
        )

    # expect: SG106
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors=None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ):
        if self.server_args.enable_dp_attention and not skip_attn_backend_init:
            # plan once here so the eager runner does not repeat it
            self.attn_backend.init_forward_metadata(forward_batch)
            skip_attn_backend_init = True
        return super().forward(
            forward_batch,
            skip_attn_backend_init=skip_attn_backend_init,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )

    # expect: SG106
    def forward_sealed(self, forward_batch: ForwardBatch):
        sealed = plan_and_seal(self.attn_backend, forward_batch)
        return super().forward(sealed)

    # expect: clean
    def forward_sealed_local(self, forward_batch: ForwardBatch):
        forward_batch.global_num_tokens_cpu = None
        forward_batch.global_num_tokens_for_logprob_cpu = None
        sealed = plan_and_seal(self.attn_backend, forward_batch)
        return super().forward(sealed)
