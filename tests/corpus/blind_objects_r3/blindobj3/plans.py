# SPDX-License-Identifier: Apache-2.0
"""Plain records handed between the stages of a draft propose()."""

from dataclasses import dataclass

import torch

from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor


@dataclass(frozen=True)
class DraftStepPlan:
    """What the query-block step of a parallel drafter will run."""

    batch_desc: BatchExecutionDescriptor
    # Requests that actually hold a query block this step.
    num_reqs: int
    # Request bucket the dispatched descriptor was picked for.
    num_reqs_padded: int
    num_query_per_req: int
    num_tokens_across_dp: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return self.num_reqs * self.num_query_per_req


@dataclass
class DecodeLoopState:
    """Mutable per-propose state for an autoregressive draft decode loop."""

    num_reqs: int
    batch_desc: BatchExecutionDescriptor
    seq_lens_cpu_upper_bound: torch.Tensor
    dcp_local_seq_lens: torch.Tensor | None = None
