"""Pre-serving warm-up of the eager decode path.

With the decode CUDA graph disabled the first real decode step pays the
attention plan's JIT cost.  The fork runs one dummy decode at the largest
bucket on every rank before serving, built the way graph capture builds its
batches: every DP rank uses the same (already padded) shape, and the batch
carries no ``global_num_tokens_cpu``, so ``ModelRunner.forward`` does not run
the MLP-sync pass on it.
"""

from __future__ import annotations

import torch

from sglang.srt.layers.dp_attention import DpPaddingMode, set_dp_buffer_len
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import require_mlp_sync


# expect: clean
def warm_eager_decode(model_runner, bs: int) -> None:
    if model_runner.decode_cuda_graph_runner is not None:
        return  # graph capture already exercised the plan
    device = model_runner.device
    fill = model_runner.attn_backend.get_cuda_graph_seq_len_fill_value()
    seq_lens = torch.full((bs,), fill, dtype=torch.int64, device=device)

    global_num_tokens_gpu = None
    if require_mlp_sync():
        dp_size = get_parallel().attn_dp_size
        global_num_tokens_gpu = torch.full(
            (dp_size,), bs, dtype=torch.int64, device=device
        )
        set_dp_buffer_len(bs * dp_size, bs, True, [bs] * dp_size)

    forward_batch = ForwardBatch(
        forward_mode=ForwardMode.DECODE,
        batch_size=bs,
        input_ids=torch.zeros((bs,), dtype=torch.int64, device=device),
        # Slot 0 of req_to_token is reserved and all zeros.
        req_pool_indices=torch.zeros((bs,), dtype=torch.int64, device=device),
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.cpu(),
        out_cache_loc=torch.zeros((bs,), dtype=torch.int64, device=device),
        seq_lens_sum=int(fill * bs),
        positions=torch.zeros((bs,), dtype=torch.int64, device=device),
        return_logprob=False,
        global_num_tokens_gpu=global_num_tokens_gpu,
        global_num_tokens_for_logprob_gpu=global_num_tokens_gpu,
        dp_padding_mode=DpPaddingMode.get_default_mode_in_cuda_graph(),
        global_dp_buffer_len=None if global_num_tokens_gpu is None else bs * dp_size,
        spec_algorithm=model_runner.spec_algorithm,
        capture_hidden_mode=CaptureHiddenMode.NULL,
    )
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    model_runner.forward(forward_batch)
