"""Length helpers shared by the fork's MLA backends.

``verify_kv_lens`` / ``draft_extend_kv_lens`` describe whole sequences (what
every DCP rank agrees on); ``rank_local_lens`` turns such lengths into this
rank's interleaved share through SGLang's own ``get_dcp_lens``.
"""

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


def verify_kv_lens(seq_lens: torch.Tensor, draft_token_num: int) -> torch.Tensor:
    """KV extent of a target-verify row: the committed prefix plus the tree."""
    return (seq_lens + draft_token_num).to(torch.int32)


def draft_extend_kv_lens(forward_batch: ForwardBatch) -> torch.Tensor:
    """Padded KV extent of a draft-extend row (see NOTE(draft_extend seq_len
    handling) in trtllm_mla_backend)."""
    max_q = max(forward_batch.extend_seq_lens_cpu)
    lens = forward_batch.seq_lens - forward_batch.extend_seq_lens + max_q
    return lens.to(torch.int32)


def decode_kv_lens(forward_batch: ForwardBatch) -> torch.Tensor:
    """Per-request KV length of a decode batch, int32 for the trtllm kernels."""
    return forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)


def rank_local_lens(lens: torch.Tensor) -> torch.Tensor:
    """This DCP rank's share of ``lens`` (identity when DCP is off)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return lens
    return get_dcp_lens(lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)
