"""Dataclasses of per-step draft state carried between pipeline stages."""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch


@dataclasses.dataclass
class DraftStepState:
    step: int
    forward_batch: ForwardBatch
    # Set by the planning stage once the backend metadata for this batch exists.
    metadata_ready: bool = False
    # Snapshot of ``forward_batch.global_num_tokens_cpu is not None`` taken when
    # the batch was built: the forward will pad it for MLP sync.
    dp_padded: bool = False
    select_index: Optional[torch.Tensor] = None
    hidden_states: Optional[torch.Tensor] = None


@dataclasses.dataclass
class DraftExtendResult:
    next_token_logits: torch.Tensor
    hidden_states: Optional[torch.Tensor]
    topk_p: Optional[torch.Tensor] = None
    topk_index: Optional[torch.Tensor] = None


@dataclasses.dataclass(frozen=True)
class PlannedBatch:
    forward_batch: ForwardBatch
    planned: bool
    can_run_graph: bool = False
