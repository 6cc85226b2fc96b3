"""Fork DFlash worker: block-draft target verify."""

from __future__ import annotations

import logging

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.dflash_info import DFlashVerifyInput
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.utils import is_npu

_is_npu = is_npu()

logger = logging.getLogger(__name__)


class ForkDFlashWorkerV2(DFlashWorkerV2):
    # idiom: sglang/srt/speculative/dflash_worker_v2.py DFlashWorkerV2 verify (0.5.23: defer_metadata_init under DP attention, skip_attn_backend_init=None there)
    # expect: clean
    def _run_target_verify(self, batch: ScheduleBatch, verify_input: DFlashVerifyInput):
        attn_dp = get_parallel().attn_dp_enabled
        seq_lens_cpu_backup = batch.seq_lens_cpu
        seq_lens_sum_backup = batch.seq_lens_sum
        if seq_lens_cpu_backup is not None:
            verify_host_seq_lens = seq_lens_cpu_backup + int(self.block_size)
            batch.seq_lens_cpu = verify_host_seq_lens
            batch.seq_lens_sum = int(verify_host_seq_lens.sum())
        try:
            verify_forward_batch, _ = verify_input.prepare_for_verify(
                batch,
                self.target_worker,
                defer_metadata_init=attn_dp,
            )
        finally:
            batch.seq_lens_cpu = seq_lens_cpu_backup
            batch.seq_lens_sum = seq_lens_sum_backup
        if attn_dp and batch.is_extend_in_batch:
            verify_forward_batch.can_run_decode_cuda_graph = False
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            skip_attn_backend_init=None if _is_npu or attn_dp else True,
        )
