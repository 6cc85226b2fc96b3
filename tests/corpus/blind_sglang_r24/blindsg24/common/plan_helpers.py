"""Small helpers the fork's speculative workers use to pre-plan attention
metadata outside ``ModelRunner.forward`` and to run the draft runner."""

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


def preplan_for_runner(model_runner: ModelRunner, forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan with the runner's own backend and mark the batch as planned."""
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch


def preplan_for_runner_replannable(
    model_runner: ModelRunner, forward_batch: ForwardBatch
) -> ForwardBatch:
    """Same plan, but let the forward path re-plan if DP padding reshapes it.

    The runner's forward plans through the very backend used here, so a
    post-pad re-plan is equivalent to this one.
    """
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return forward_batch


def run_runner_logits(model_runner: ModelRunner, forward_batch: ForwardBatch):
    """One forward through the runner (MLP-sync padding included)."""
    return model_runner.forward(forward_batch).logits_output
