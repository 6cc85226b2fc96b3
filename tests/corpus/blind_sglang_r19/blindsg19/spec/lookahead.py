"""Greedy look-ahead decoding on a small proposer model: k single-token
decode steps that reuse one attention plan (the proposer writes its KV into
slots reserved up front, so seq_lens do not move between the steps)."""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.model_runner import ModelRunner


class LookaheadDecoder:
    """Drives a proposer ModelRunner built with capture_decode_cuda_graph=False
    (this class captures its own k-step graph in :meth:`capture_one`), so the
    runner's forward always takes its eager path."""

    def __init__(self, runner: ModelRunner, num_lookahead: int):
        self.runner = runner
        self.num_lookahead = num_lookahead

    # expect: SG106
    def decode_steps(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        assert forward_batch.forward_mode.is_decode()
        # One plan for all steps: the reserved slots make every step see the
        # same page table and lengths.
        self.runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        proposals = []
        out_cache_loc = forward_batch.out_cache_loc.view(self.num_lookahead, -1)
        for step in range(self.num_lookahead):
            forward_batch.out_cache_loc = out_cache_loc[step]
            logits = self.runner.forward(forward_batch).logits_output.next_token_logits
            next_ids = torch.argmax(logits, dim=-1)
            proposals.append(next_ids)
            forward_batch.input_ids = next_ids
            forward_batch.positions.add_(1)
        return proposals

    # expect: clean
    def decode_steps_prepadded(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        assert forward_batch.forward_mode.is_decode()
        raw_bs = forward_batch.batch_size
        runner = self.runner
        # Bring the batch to its MLP-sync shape once, then plan that shape and
        # drive the eager runner directly, so nothing reshapes it afterwards.
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(runner)
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        proposals = []
        out_cache_loc = forward_batch.out_cache_loc
        for step in range(self.num_lookahead):
            logits = runner.eager_runner.execute(forward_batch).next_token_logits
            next_ids = torch.argmax(logits, dim=-1)
            proposals.append(next_ids[:raw_bs])
            forward_batch.input_ids = next_ids
            forward_batch.positions.add_(1)
            forward_batch.out_cache_loc = out_cache_loc
        return proposals

    # expect: clean
    def capture_one(self, bs: int, buffers, graph, pool) -> None:
        """Capture the k-step look-ahead for one padded batch size.

        The capture batch carries the static DP buffers on the device only
        (no host token counts), so the runner's forward does not pad it.
        """
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=bs,
            input_ids=buffers.input_ids[:bs],
            req_pool_indices=buffers.req_pool_indices[:bs],
            seq_lens=buffers.seq_lens[:bs],
            out_cache_loc=buffers.out_cache_loc[: bs * self.num_lookahead],
            seq_lens_sum=int(buffers.seq_lens[:bs].sum().item()),
            positions=buffers.positions[:bs],
            global_num_tokens_gpu=buffers.global_num_tokens_gpu,
            global_num_tokens_for_logprob_gpu=buffers.global_num_tokens_gpu,
        )
        self.runner.attn_backend.init_forward_metadata_out_graph(
            forward_batch, in_capture=True
        )
        forward_batch.mark_forward_metadata_ready()
        with torch.cuda.graph(graph, pool=pool):
            out_cache_loc = forward_batch.out_cache_loc.view(self.num_lookahead, -1)
            for step in range(self.num_lookahead):
                forward_batch.out_cache_loc = out_cache_loc[step]
                logits = self.runner.forward(
                    forward_batch
                ).logits_output.next_token_logits
                forward_batch.input_ids = torch.argmax(logits, dim=-1)
