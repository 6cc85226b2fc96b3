"""Hot-loop draft-extend that calls the draft model directly.

Bypasses ``ModelRunner.forward`` (step spans, recorder, canary) for the
per-iteration draft extend; does the DP/MLP-sync bookkeeping itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


def _call_model(draft_runner: "ModelRunner", forward_batch: ForwardBatch):
    with forward_context(
        ForwardContext(attn_backend=draft_runner.attn_backend),
        forward_batch=forward_batch,
    ):
        return draft_runner.model.forward(
            forward_batch.input_ids,
            forward_batch.positions,
            forward_batch,
        )


# expect: SG106
def run_draft_model_direct(draft_runner: "ModelRunner", forward_batch: ForwardBatch):
    if not forward_batch.forward_mode.is_idle():
        # Plan first so the host work overlaps the DP all-gather below.
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(draft_runner)
    logits_output = _call_model(draft_runner, forward_batch)
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.post_forward_mlp_sync_batch(logits_output)
    return logits_output


# expect: clean
def run_draft_model_direct_replanned(
    draft_runner: "ModelRunner", forward_batch: ForwardBatch
):
    backend = draft_runner.attn_backend
    if not forward_batch.forward_mode.is_idle():
        backend.init_forward_metadata(forward_batch)
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(draft_runner)
        # DP padding reshaped the batch: plan the final shape again.
        backend.init_forward_metadata(forward_batch)
    logits_output = _call_model(draft_runner, forward_batch)
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.post_forward_mlp_sync_batch(logits_output)
    return logits_output
