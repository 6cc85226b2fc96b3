"""Fork subclasses of the EAGLE draft / draft-extend cuda-graph runners that
own their eager fallback (batch past the captured buckets) and an eager
warm-up of that fallback."""

from __future__ import annotations

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import (
    EAGLEDraftCudaGraphRunner,
)
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleDraftInput


class ForkDraftGraphRunner(EAGLEDraftCudaGraphRunner):
    def _warmup_batch(self, bs: int) -> ForwardBatch:
        """Rank-local dummy draft batch over the static buffers (no DP gather)."""
        buffers = self.buffers
        num_tokens = bs * self.topk
        seq_lens = buffers.seq_lens[:bs]
        spec_info = EagleDraftInput(
            topk_p=buffers.topk_p[:bs],
            topk_index=buffers.topk_index[:bs],
            hidden_states=(
                buffers.hidden_states[:bs] if buffers.hidden_states is not None else None
            ),
            capture_hidden_mode=CaptureHiddenMode.LAST,
        )
        sampling_info = SamplingBatchInfo(
            temperatures=torch.ones((bs, 1), dtype=torch.float, device=self.device),
            top_ps=torch.ones((bs,), dtype=torch.float, device=self.device),
            top_ks=torch.ones((bs,), dtype=torch.int32, device=self.device),
            min_ps=torch.zeros((bs,), dtype=torch.float, device=self.device),
            is_all_greedy=True,
            is_any_greedy=True,
            need_top_p_sampling=False,
            need_top_k_sampling=False,
            need_min_p_sampling=False,
            vocab_size=self.model_runner.model_config.vocab_size,
        )
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=bs,
            input_ids=None,
            req_pool_indices=buffers.req_pool_indices[:bs],
            seq_lens=seq_lens,
            seq_lens_cpu=buffers.seq_lens_cpu[:bs],
            out_cache_loc=buffers.out_cache_loc[: num_tokens * self.speculative_num_steps],
            seq_lens_sum=int(buffers.seq_lens_cpu[:bs].sum()),
            return_logprob=False,
            positions=buffers.positions[:num_tokens],
            spec_algorithm=self.model_runner.spec_algorithm,
            spec_info=spec_info,
            sampling_info=sampling_info,
            capture_hidden_mode=CaptureHiddenMode.LAST,
        )
        self.model_runner.kv_index_translator.bind_runner_slots(forward_batch)
        return forward_batch

    # idiom: speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner.execute + EagleDraftWorker.draft eager fallback
    # expect: SG106
    def execute_or_fallback(self, forward_batch: ForwardBatch):
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch)
        # Past the largest captured bucket: run the draft steps eagerly with
        # one up-front plan of every step's backend.
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.eagle_worker.draft_forward(forward_batch)

    # idiom: speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner.capture_one_shape (dummy batch without global_num_tokens_cpu, plan + mark)
    # expect: clean
    def warmup_eager_shape(self, bs: int):
        forward_batch = self._warmup_batch(bs)
        # Built here, rank-local: nothing gathered across DP ranks, so the
        # draft forwards below run it unpadded and the plan stays valid.
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        with forward_context(
            ForwardContext(attn_backend=self.draft_attn_backend),
            forward_batch=forward_batch,
        ):
            return self.eagle_worker.draft_forward(forward_batch)


class ForkDraftExtendGraphRunner(EAGLEDraftExtendCudaGraphRunner):
    def _gather_rows(self, logits_output, select_index: torch.Tensor):
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output

    # idiom: speculative/eagle_draft_extend_cuda_graph_runner.py EAGLEDraftExtendCudaGraphRunner.execute (eager fallback)
    # expect: SG106
    def eager_fallback(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        output = self.model_runner.forward(forward_batch)
        return self._gather_rows(output.logits_output, select_index)

    # idiom: speculative/eagle_draft_extend_cuda_graph_runner.py EAGLEDraftExtendCudaGraphRunner.execute (eager fallback, replan-equivalent mark)
    # expect: clean
    def eager_fallback_replannable(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        if not forward_batch.forward_mode.is_idle():
            # The draft runner's attn_backend IS the draft-extend backend, so
            # the forward's own post-pad plan is equivalent to this one.
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        output = self.model_runner.forward(forward_batch)
        return self._gather_rows(output.logits_output, select_index)
