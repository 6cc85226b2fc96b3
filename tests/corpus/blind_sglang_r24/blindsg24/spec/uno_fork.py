"""UNO worker patch: plan the target block before handing it to the worker."""

import torch

from sglang.srt.speculative.spec_info import SpecInputType
from sglang.srt.speculative.uno_worker_v2 import UnoWorkerV2


class ForkUnoWorkerV2(UnoWorkerV2):
    # idiom: sglang/srt/speculative/uno_worker_v2.py UnoWorkerV2._make_forward_batch + _run_target_block
    # expect: clean
    def run_verify_block_preplanned(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        out_cache_loc: torch.Tensor,
        prefix_lens: torch.Tensor,
        req_pool_indices: torch.Tensor,
    ):
        forward_batch = self._make_forward_batch(
            spec_input_type=SpecInputType.UNO_VERIFY,
            input_ids=input_ids,
            positions=positions,
            out_cache_loc=out_cache_loc,
            prefix_lens=prefix_lens,
            seq_lens_cpu=None,
            seq_lens_sum=None,
            req_pool_indices=req_pool_indices,
        )
        graph_runner = getattr(self.model_runner, "decode_cuda_graph_runner", None)
        if not (graph_runner is not None and graph_runner.can_run_graph(forward_batch)):
            # _make_forward_batch builds the batch directly (never MLP-synced),
            # so the eager plan below is still the plan of what the forward runs.
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._run_target_block(forward_batch)
