"""Draft-extend drivers whose pre-planning is switched by env / config."""

from __future__ import annotations

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils.common import require_mlp_sync

from blindsg22.common.config import (
    DEFAULT_SPEC_CONFIG,
    ForkSpecConfig,
    preplan_enabled_from_env,
)


class ForkFlaggedDraftExtend:
    draft_runner: ModelRunner
    spec_config: ForkSpecConfig

    def __init__(self, draft_runner: ModelRunner):
        self.draft_runner = draft_runner
        self.spec_config = DEFAULT_SPEC_CONFIG

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (pre-plan switched by an env var, like SGLANG_ENABLE_OVERLAP_PLAN_STREAM)
    # expect: SG106
    def run_env_preplanned(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        if preplan_enabled_from_env() and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw order (pad, plan, eager runner) switched by an env var
    # expect: clean
    def run_env_pad_first(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.draft_runner
        if not preplan_enabled_from_env() or forward_batch.forward_mode.is_idle():
            return runner.forward(forward_batch).logits_output
        runner._prepare_eager_forward_batch(forward_batch)
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        logits_output = runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(logits_output)
        return logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (policy from a config object)
    # expect: SG106
    def run_config_preplanned(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        cfg = self.spec_config
        if cfg.preplan_draft_extend:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=cfg.replan_equivalent
            )
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/dflash_worker_v2.py (defer_metadata_init when the forward will pad), config object plus require_mlp_sync
    # expect: clean
    def run_config_deferred_under_sync(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        cfg = self.spec_config
        if cfg.preplan_draft_extend and not require_mlp_sync():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=cfg.replan_equivalent
            )
        return self.draft_runner.forward(forward_batch).logits_output
