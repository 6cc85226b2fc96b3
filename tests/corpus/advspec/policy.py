"""Helpers of the adversarial corpus that live in another module than the speculators calling them."""

from __future__ import annotations

from dataclasses import dataclass

from vllm.config.compilation import CUDAGraphMode


class PaddingPolicy:
    # idiom: vllm-project/vllm vllm/v1/cudagraph_dispatcher.py CudagraphDispatcher (a policy object a speculator
    #        keeps as an attribute and asks for the size to run)
    def __init__(self, max_num_tokens: int) -> None:
        self.max_num_tokens = max_num_tokens

    @staticmethod
    def padded_tokens(batch_desc) -> int:
        return batch_desc.num_tokens

    @classmethod
    def tokens_for(cls, batch_desc, num_query_tokens: int) -> int:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            return batch_desc.num_tokens
        return num_query_tokens

    def run_size(self, batch_desc) -> int:
        return min(self.max_num_tokens, batch_desc.num_tokens) if self.max_num_tokens else batch_desc.num_tokens

    def attention_size(self, batch_desc, query_start_loc_np) -> int:
        return batch_desc.num_tokens if batch_desc.cg_mode.has_full_cudagraphs() else int(query_start_loc_np[-1])


def graph_tokens(batch_desc, num_query_tokens: int) -> int:
    """The count the attention metadata needs: the captured size for FULL graphs, the real one otherwise."""
    return num_query_tokens if batch_desc.cg_mode != CUDAGraphMode.FULL else batch_desc.num_tokens


def dp_padded_tokens(num_tokens_across_dp, dp_rank: int) -> int:
    return int(num_tokens_across_dp[dp_rank])


@dataclass(frozen=True)
class DraftStep:
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/dp_utils.py DPSyncState (a frozen dataclass carrying the agreed
    #        sizes of one step)
    num_reqs: int
    num_tokens: int
    step: int = 1
