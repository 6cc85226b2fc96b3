"""Adversarial corpus, SG103: every way a padded token count is derived before it reaches the shared metadata helper
(max, arithmetic, slicing, tuple unpacking, walrus, comprehensions, DP-synced maxima, "after padding" counts), and
derivations that give the real count back."""

from __future__ import annotations

import bisect

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class DerivedCountSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py (0.28.0)
    #        AutoRegressiveSpeculator._multi_step_decode, with the count bounded below by the requests
    # expect: SG103
    def decode_max(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        num_tokens_padded = max(batch_desc.num_tokens, num_reqs)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=batch_desc.num_reqs or num_reqs,
            num_tokens_padded=num_tokens_padded,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/cudagraph_dispatcher.py CudagraphDispatcher._create_padded_batch_descriptor
    #        (`num_tokens_padded // uniform_decode_query_len`), rounded back to whole requests
    # expect: SG103
    def decode_rounded(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_per_req, seq_lens):
        per_req = batch_desc.num_tokens // num_query_per_req
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=per_req,
            num_tokens_padded=per_req * num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/spec_decode/llm_base_proposer.py SpecDecodeBaseProposer
    #        .build_model_inputs_first_pass (`self.input_ids[:num_input_tokens]`), the count read back as the
    #        length of the sliced buffer
    # expect: SG103
    def decode_sliced(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        positions = self.input_buffers.positions[: batch_desc.num_tokens]
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=positions.shape[0],
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same slice with the real count: its length is the real count
    # expect: clean
    def decode_sliced_real(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np, seq_lens):
        num_tokens = batch_desc.num_tokens if batch_desc.cg_mode == CUDAGraphMode.FULL else int(query_start_loc_np[-1])
        positions = self.input_buffers.positions[:num_tokens]
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=len(positions),
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py (0.28.0) DFlashSpeculator.propose
    #        (`batch_desc, num_tokens_across_dp = dispatch_cg_and_sync_dp(...)`), the sizes unpacked as a pair
    # expect: SG103
    def propose_unpacked(self, num_reqs, num_query_tokens, seq_lens):
        batch_desc, _ = dispatch_cg_and_sync_dp(self.query_cudagraph_manager, num_reqs, num_query_tokens)
        num_reqs_padded, num_tokens_padded = batch_desc.num_reqs or num_reqs, batch_desc.num_tokens
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs_padded,
            num_tokens_padded=num_tokens_padded,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same pair, with the FULL choice made in the tuple
    # expect: clean
    def propose_unpacked_chosen(self, num_reqs, num_query_tokens, seq_lens):
        batch_desc, _ = dispatch_cg_and_sync_dp(self.query_cudagraph_manager, num_reqs, num_query_tokens)
        full = batch_desc.cg_mode == CUDAGraphMode.FULL
        num_reqs_padded, num_tokens = (
            (batch_desc.num_reqs, batch_desc.num_tokens) if full else (num_reqs, num_query_tokens)
        )
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs_padded or num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/dp_utils.py sync_cudagraph_and_dp_padding (an assignment
    #        expression keeps the padded count it tests)
    # expect: SG103
    def decode_walrus(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        if (n := batch_desc.num_tokens) > num_reqs:
            return self._build_draft_attn_metadata(
                num_reqs=num_reqs,
                num_reqs_padded=num_reqs,
                num_tokens_padded=n,
                seq_lens_cpu_upper_bound=seq_lens,
                step=1,
            )
        return None

    # idiom: vllm-project/vllm vllm/v1/worker/gpu_ubatch_wrapper.py UBatchWrapper.__call__
    #        (`sum(ubatch_slice.num_tokens for ubatch_slice in ubatch_slices)`) over padded micro-batches
    # expect: SG103
    def decode_ubatches(self, num_reqs, ubatch_descs: list[BatchExecutionDescriptor], seq_lens):
        num_tokens = sum(desc.num_tokens for desc in ubatch_descs)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: a list comprehension of the sizes, then its last entry
    # expect: SG103
    def decode_sizes_list(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        sizes = [d.num_tokens for d in (batch_desc,) if d is not None]
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=sizes[-1],
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py (0.33.0)
    #        DraftModelSpeculator._build_attn_metadata (the padded count for FULL, the query end otherwise), with
    #        `min` of the two
    # expect: clean
    def decode_min(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np, seq_lens):
        real = int(query_start_loc_np[-1])
        num_tokens = (
            batch_desc.num_tokens if batch_desc.cg_mode == CUDAGraphMode.FULL else min(batch_desc.num_tokens, real)
        )
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )


class DataParallelSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/dp_utils.py sync_cudagraph_and_dp_padding
    #        (`ubatch_num_tokens = int(num_tokens_across_dp.max())`)
    # expect: SG103
    def propose_dp_max(self, num_reqs, batch_sync, seq_lens):
        num_tokens_across_dp = batch_sync.num_tokens_across_dp
        num_tokens = int(num_tokens_across_dp.max())
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/spec_decode/llm_base_proposer.py
    #        SpecDecodeBaseProposer._determine_batch_execution_and_padding
    #        (`num_tokens_padded = int(num_tokens_across_dp[dp_rank].item())`), returned with the mode and used for
    #        every mode
    # expect: SG103
    def propose_dp_rank(self, num_reqs, num_tokens, seq_lens):
        cudagraph_mode, num_tokens_padded = self._dp_padding(num_tokens)
        del cudagraph_mode
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens_padded,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same pair, tested
    # expect: clean
    def propose_dp_rank_checked(self, num_reqs, num_tokens, seq_lens):
        cudagraph_mode, num_tokens_padded = self._dp_padding(num_tokens)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens_padded if cudagraph_mode == CUDAGraphMode.FULL else num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    def _dp_padding(self, num_tokens: int) -> tuple[CUDAGraphMode, int]:
        batch_desc, batch_sync = dispatch_cg_and_sync_dp(self.cudagraph_manager, 0, num_tokens)
        num_tokens_padded = batch_desc.num_tokens
        if batch_sync is not None:
            num_tokens_padded = int(batch_sync.num_tokens_across_dp[self.dp_rank].item())
        return batch_desc.cg_mode, num_tokens_padded

    # idiom: sgl-project/sglang python/sglang/srt/model_executor/forward_batch_info.py
    #        ForwardBatch.prepare_mlp_sync_batch (`max_num_tokens = max(global_num_tokens)`,
    #        `global_num_tokens = [max_num_tokens] * sync_group_size`, then this rank's entry)
    # expect: SG103
    def propose_gathered(self, num_reqs, global_num_tokens, dp_rank, sync_group_size, seq_lens):
        max_num_tokens = max(global_num_tokens)
        global_num_tokens = [max_num_tokens] * sync_group_size
        num_tokens = global_num_tokens[dp_rank]
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same, reading this rank's own count before the list is padded (the SUM_LEN branch)
    # expect: clean
    def propose_gathered_own(self, num_reqs, global_num_tokens, dp_rank, seq_lens):
        num_tokens = global_num_tokens[dp_rank] if len(global_num_tokens) > 1 else global_num_tokens[0]
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_inputs
    #        (`input_batch.num_tokens_after_padding`) handed on for every mode
    # expect: SG103
    def propose_after_padding(self, input_batch, step):
        return self._build_draft_attn_metadata(
            num_reqs=input_batch.num_reqs,
            num_reqs_padded=input_batch.num_reqs_after_padding,
            num_tokens_padded=input_batch.num_tokens_after_padding,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/cudagraph_dispatcher.py CudagraphDispatcher (`_bs_to_padded_graph_size`),
    #        and sgl-project/sglang python/sglang/srt/model_executor/cuda_graph_runner.py CudaGraphRunner.replay_prepare
    #        (`index = bisect.bisect_left(self.capture_bs, raw_bs); bs = self.capture_bs[index]`)
    # expect: SG103
    def propose_capture_size(self, num_reqs, num_query_tokens, seq_lens):
        index = bisect.bisect_left(self.cudagraph_batch_sizes, num_query_tokens)
        num_tokens = self.cudagraph_batch_sizes[index]
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )
