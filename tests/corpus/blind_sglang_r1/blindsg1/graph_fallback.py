"""Graph-runner overrides: eager fallback that keeps the captured bucket shape,
and a trimmed EAGLE draft replay."""

from __future__ import annotations

from types import SimpleNamespace

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.model_executor.runner import DecodeCudaGraphRunner
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import (
    EAGLEDraftCudaGraphRunner,
)

from blindsg1._dp_utils import align_tokens_to_attn_tp, grow_to_bucket


class BucketedEagerFallbackRunner(DecodeCudaGraphRunner):
    """Ranks that cannot replay (uncaptured LoRA / attention variant) still
    run at the bucket size their DP peers replay at, so MoE collectives line
    up."""

    # expect: SG106
    def execute_or_eager(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        model_runner = self.model_runner
        if forward_batch.needs_forward_metadata_init():
            model_runner.attn_backend.init_forward_metadata(forward_batch)
        grow_to_bucket(
            forward_batch, model_runner, self.capture_bs, self.captured_req_width
        )
        return model_runner.model.forward(
            forward_batch.input_ids,
            forward_batch.positions,
            forward_batch,
            **model_runner._pp_kwargs(pp_proxy_tensors),
        )


class PeerShapeFallbackRunner(DecodeCudaGraphRunner):
    # expect: clean
    def execute_or_eager(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        model_runner = self.model_runner
        raw_bs = forward_batch.batch_size
        bs = grow_to_bucket(
            forward_batch, model_runner, self.capture_bs, self.captured_req_width
        )
        if bs != raw_bs or forward_batch.needs_forward_metadata_init():
            model_runner.attn_backend.init_forward_metadata(forward_batch)
        return model_runner.model.forward(
            forward_batch.input_ids,
            forward_batch.positions,
            forward_batch,
            **model_runner._pp_kwargs(pp_proxy_tensors),
        )


class _DraftReplayMixin:
    def _stage_inputs(self, forward_batch: ForwardBatch, raw_bs: int, bs: int):
        buffers = self.buffers
        raw_num_token = raw_bs * self.captured_req_width
        if bs != raw_bs:
            buffers.seq_lens.fill_(self.seq_len_fill_value)
            buffers.out_cache_loc.zero_()
            buffers.positions.zero_()
            buffers.topk_p.zero_()
            buffers.topk_index.zero_()
            buffers.req_pool_indices.zero_()
            if buffers.hidden_states is not None:
                buffers.hidden_states.zero_()
        buffers.seq_lens[:raw_bs].copy_(forward_batch.seq_lens)
        buffers.out_cache_loc[: raw_num_token * self.speculative_num_steps].copy_(
            forward_batch.out_cache_loc
        )
        buffers.positions[:raw_num_token].copy_(forward_batch.positions)
        buffers.topk_p[:raw_bs].copy_(forward_batch.spec_info.topk_p)
        buffers.topk_index[:raw_bs].copy_(forward_batch.spec_info.topk_index)
        buffers.req_pool_indices[:raw_bs].copy_(forward_batch.req_pool_indices)
        if buffers.hidden_states is not None:
            buffers.hidden_states[:raw_bs].copy_(forward_batch.spec_info.hidden_states)

    def _restore(self, forward_batch, raw_bs, raw_seq_lens_sum, raw_out_cache_loc):
        buffers = self.buffers
        forward_batch.batch_size = raw_bs
        forward_batch.positions = buffers.positions[: raw_bs * self.captured_req_width]
        forward_batch.seq_lens = buffers.seq_lens[:raw_bs]
        forward_batch.req_pool_indices = buffers.req_pool_indices[:raw_bs]
        forward_batch.seq_lens_sum = raw_seq_lens_sum
        forward_batch.out_cache_loc = raw_out_cache_loc


class TrimmedDraftGraphRunner(_DraftReplayMixin, EAGLEDraftCudaGraphRunner):
    # expect: SG106
    def execute(self, forward_batch: ForwardBatch):
        buffers = self.buffers
        raw_bs = forward_batch.batch_size
        bs = self._pad_to_bucket(raw_bs, self.capture_bs)
        num_tokens = bs * self.captured_req_width
        self._stage_inputs(forward_batch, raw_bs, bs)

        # Per-step kv_indptr / kv_indices for the draft decode steps.
        self.draft_attn_backend.init_forward_metadata_out_graph(forward_batch)

        raw_seq_lens_sum = forward_batch.seq_lens_sum
        raw_out_cache_loc = forward_batch.out_cache_loc
        if bs != raw_bs:
            forward_batch.batch_size = bs
            forward_batch.seq_lens = buffers.seq_lens[:bs]
            forward_batch.req_pool_indices = buffers.req_pool_indices[:bs]
            forward_batch.positions = buffers.positions[:num_tokens]
            forward_batch.out_cache_loc = buffers.out_cache_loc[
                : num_tokens * self.speculative_num_steps
            ]
            if raw_seq_lens_sum is not None:
                forward_batch.seq_lens_sum = (
                    raw_seq_lens_sum + (bs - raw_bs) * self.seq_len_fill_value
                )

        self.raw_bs = raw_bs
        self.bs = bs
        out = self._replay_graph(self._make_graph_key(bs), forward_batch)
        if bs != raw_bs:
            out = self._postprocess_output_to_raw_bs(out, raw_bs)
            self._restore(forward_batch, raw_bs, raw_seq_lens_sum, raw_out_cache_loc)
        return out


class SlimDraftGraphRunner(_DraftReplayMixin, EAGLEDraftCudaGraphRunner):
    # expect: clean
    def execute(self, forward_batch: ForwardBatch):
        buffers = self.buffers
        raw_bs = forward_batch.batch_size
        bs = self._pad_to_bucket(raw_bs, self.capture_bs)
        num_tokens = bs * self.captured_req_width
        self._stage_inputs(forward_batch, raw_bs, bs)

        raw_seq_lens_sum = forward_batch.seq_lens_sum
        raw_out_cache_loc = forward_batch.out_cache_loc
        if bs != raw_bs:
            forward_batch.batch_size = bs
            forward_batch.seq_lens = buffers.seq_lens[:bs]
            forward_batch.req_pool_indices = buffers.req_pool_indices[:bs]
            forward_batch.positions = buffers.positions[:num_tokens]
            forward_batch.out_cache_loc = buffers.out_cache_loc[
                : num_tokens * self.speculative_num_steps
            ]
            if raw_seq_lens_sum is not None:
                forward_batch.seq_lens_sum = (
                    raw_seq_lens_sum + (bs - raw_bs) * self.seq_len_fill_value
                )

        self.draft_attn_backend.init_forward_metadata_out_graph(
            SimpleNamespace(**vars(forward_batch), num_padding=bs - raw_bs)
        )

        self.raw_bs = raw_bs
        self.bs = bs
        out = self._replay_graph(self._make_graph_key(bs), forward_batch)
        if bs != raw_bs:
            out = self._postprocess_output_to_raw_bs(out, raw_bs)
            self._restore(forward_batch, raw_bs, raw_seq_lens_sum, raw_out_cache_loc)
        return out


# expect: SG106
def eager_draft_extend_sp(model_runner: ModelRunner, forward_batch: ForwardBatch):
    """Draft-extend v2 on the eager runner with SP-aligned token counts."""
    assert forward_batch.forward_mode.is_draft_extend_v2()
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    if forward_batch.attn_tp_sequence_sharded:
        align_tokens_to_attn_tp(forward_batch, model_runner)
    return model_runner.eager_runner.execute(forward_batch)


# expect: clean
def eager_target_verify_sp(model_runner: ModelRunner, forward_batch: ForwardBatch):
    """Target verify on the eager runner with SP-aligned token counts."""
    assert forward_batch.forward_mode.is_target_verify()
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    if forward_batch.attn_tp_sequence_sharded:
        align_tokens_to_attn_tp(forward_batch, model_runner)
    return model_runner.eager_runner.execute(forward_batch)
