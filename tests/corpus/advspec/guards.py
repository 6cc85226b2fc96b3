"""Adversarial corpus, SG103: every way a speculator guards on the CUDA-graph mode before it hands a token count to
the shared metadata helper. Each function names the real code its idiom comes from; `# expect:` says whether the
function has the bug (a padded count reaches the helper outside FULL graphs) or not."""

from __future__ import annotations

from dataclasses import replace

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class LocalBoolSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu_model_runner.py GPUModelRunner._dummy_run
    #        (`pad_attn = cudagraph_runtime_mode == CUDAGraphMode.FULL`)
    # expect: clean
    def propose(self, num_reqs, num_query_tokens, seq_lens):
        batch_desc, _ = dispatch_cg_and_sync_dp(self.cudagraph_manager, num_reqs, num_query_tokens)
        pad_attn = batch_desc.cg_mode == CUDAGraphMode.FULL
        num_tokens = batch_desc.num_tokens if pad_attn else num_query_tokens
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=batch_desc.num_reqs or num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/pcp_manager.py PCPManager (`if batch_desc.cg_mode !=
    #        CUDAGraphMode.NONE: padded_num_tokens = batch_desc.num_tokens`): any graph pads, but PIECEWISE must not
    # expect: SG103
    def propose_graphed(self, num_reqs, num_query_tokens, seq_lens):
        batch_desc, _ = dispatch_cg_and_sync_dp(self.cudagraph_manager, num_reqs, num_query_tokens)
        use_graph = batch_desc.cg_mode != CUDAGraphMode.NONE
        num_tokens = num_query_tokens
        if use_graph:
            num_tokens = batch_desc.num_tokens
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )


class PredicateSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/attention/backends/flash_attn.py FlashAttentionMetadataBuilder.__init__
    #        (`cudagraph_mode.has_full_cudagraphs()`), asked of the batch's own mode
    # expect: clean
    def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np, seq_lens):
        if batch_desc.cg_mode.has_full_cudagraphs():
            num_tokens = batch_desc.num_tokens
        else:
            num_tokens = int(query_start_loc_np[num_reqs])
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/config/compilation.py CUDAGraphMode.has_piecewise_cudagraphs, read as "not
    #        piecewise means full": NONE is neither, and gets the padded count
    # expect: SG103
    def propose_not_piecewise(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np, seq_lens):
        if not batch_desc.cg_mode.has_piecewise_cudagraphs():
            num_tokens = batch_desc.num_tokens
        else:
            num_tokens = int(query_start_loc_np[num_reqs])
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/config/compilation.py CUDAGraphMode.__bool__ (`self != CUDAGraphMode.NONE`):
    #        a truthy mode is PIECEWISE or FULL
    # expect: SG103
    def propose_truthy(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        num_tokens = batch_desc.num_tokens if batch_desc.cg_mode else num_query_tokens
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/config/compilation.py CUDAGraphMode.max_cudagraph_mode / has_mode
    # expect: clean
    def propose_has_mode(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        full = batch_desc.cg_mode.has_mode(CUDAGraphMode.FULL)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=batch_desc.num_tokens if full else num_query_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )


class EarlyReturnSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu_ubatch_wrapper.py UBatchWrapper.__call__
    #        (`if cudagraph_runtime_mode in (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE): return ...`)
    # expect: clean
    def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        if batch_desc.cg_mode in (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE):
            return self._build_draft_attn_metadata(
                num_reqs=num_reqs,
                num_reqs_padded=num_reqs,
                num_tokens_padded=num_query_tokens,
                seq_lens_cpu_upper_bound=seq_lens,
                step=1,
            )
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=batch_desc.num_reqs or num_reqs,
            num_tokens_padded=batch_desc.num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same early return, written for eager only: a PIECEWISE batch falls through to the padded count
    # expect: SG103
    def propose_eager_only(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        if batch_desc.cg_mode in (CUDAGraphMode.NONE,):
            return self._build_draft_attn_metadata(
                num_reqs=num_reqs,
                num_reqs_padded=num_reqs,
                num_tokens_padded=num_query_tokens,
                seq_lens_cpu_upper_bound=seq_lens,
                step=1,
            )
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=batch_desc.num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/cudagraph_utils.py CudaGraphManager.run_fullgraph
    #        (`assert desc.cg_mode == CUDAGraphMode.FULL`)
    # expect: clean
    def replay(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        assert batch_desc.cg_mode == CUDAGraphMode.FULL, f"Expected FULL mode, got {batch_desc.cg_mode}"
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=batch_desc.num_reqs or num_reqs,
            num_tokens_padded=batch_desc.num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same assert, written as "some graph": PIECEWISE passes it
    # expect: SG103
    def replay_any_graph(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        assert batch_desc.cg_mode != CUDAGraphMode.NONE, "graph replay needs a captured graph"
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=batch_desc.num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/cudagraph_utils.py
    #        SpeculatorCudaGraphManager.specialize_spec_tokens (`if desc.cg_mode != CUDAGraphMode.FULL ...: return`)
    # expect: clean
    def propose_full_or_nothing(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        if batch_desc.cg_mode != CUDAGraphMode.FULL:
            raise NotImplementedError("draft decode runs only as a FULL graph")
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=batch_desc.num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )


class ExhaustiveSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/cudagraph_utils.py CudaGraphManager.capture.forward_fn
    #        (`if cg_mode == CUDAGraphMode.PIECEWISE: ... else: ...` over every mode)
    # expect: clean
    def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        mode = batch_desc.cg_mode
        if mode == CUDAGraphMode.FULL:
            num_tokens = batch_desc.num_tokens
        elif mode == CUDAGraphMode.PIECEWISE:
            num_tokens = num_query_tokens
        else:
            num_tokens = num_query_tokens
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same chain with a padded default that only PIECEWISE overrides: NONE keeps it
    # expect: SG103
    def propose_default_padded(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        num_tokens = batch_desc.num_tokens
        if batch_desc.cg_mode is CUDAGraphMode.PIECEWISE:
            num_tokens = num_query_tokens
        elif batch_desc.cg_mode is CUDAGraphMode.FULL:
            pass
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu_ubatch_wrapper.py UBatchWrapper.__call__
    #        (`cudagraph_runtime_mode is CUDAGraphMode.FULL`), tested through a walrus
    # expect: clean
    def propose_walrus(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        if (mode := batch_desc.cg_mode) is not CUDAGraphMode.FULL:
            num_tokens = num_query_tokens
        else:
            num_tokens = batch_desc.num_tokens
        del mode
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/cudagraph_utils.py (`desc.cg_mode.name`, str(mode)), a mode
    #        compared by its name
    # expect: clean
    def propose_by_name(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        num_tokens = batch_desc.num_tokens if batch_desc.cg_mode.name == "FULL" else num_query_tokens
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/dp_utils.py sync_cudagraph_and_dp_padding
    #        (`tensor[1][dp_rank] = desired_batch_desc.cg_mode.value`), a mode compared by its value
    # expect: SG103
    def propose_by_value(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        num_tokens = batch_desc.num_tokens if batch_desc.cg_mode.value >= 1 else num_query_tokens
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )


class ModeParameterSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn
    #        (the mode passed in, the padded count an "after padding" attribute)
    # expect: clean
    def build_step_metadata(self, input_batch, cudagraph_mode: CUDAGraphMode, step: int):
        if cudagraph_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        return self._build_draft_attn_metadata(
            num_reqs=input_batch.num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: the same, with the mode test that pcp_manager.py uses for "padded at all" (`!= CUDAGraphMode.NONE`)
    # expect: SG103
    def build_step_metadata_graphed(self, input_batch, cudagraph_mode: CUDAGraphMode, step: int):
        num_tokens = input_batch.num_tokens
        if cudagraph_mode != CUDAGraphMode.NONE:
            num_tokens = input_batch.num_tokens_after_padding
        return self._build_draft_attn_metadata(
            num_reqs=input_batch.num_reqs,
            num_reqs_padded=input_batch.num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu_ubatch_wrapper.py UBatchWrapper.__call__ (the mode is demoted
    #        to NONE when no graph was captured for the shape, and the count follows the demoted mode)
    # expect: clean
    def propose_demoted(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        cudagraph_runtime_mode = batch_desc.cg_mode
        if batch_desc.num_tokens not in self.captured_sizes:
            cudagraph_runtime_mode = CUDAGraphMode.NONE
        num_tokens = batch_desc.num_tokens if cudagraph_runtime_mode == CUDAGraphMode.FULL else num_query_tokens
        self._run(cudagraph_runtime_mode)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/cudagraph_utils.py
    #        SpeculatorCudaGraphManager.specialize_spec_tokens (`replace(desc, cg_mode=CUDAGraphMode.NONE)`), and
    #        the count read from the descriptor that now says NONE
    # expect: clean
    def propose_replaced(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        desc = batch_desc if batch_desc in self.graphs else replace(batch_desc, cg_mode=CUDAGraphMode.NONE)
        num_tokens = desc.num_tokens if desc.cg_mode == CUDAGraphMode.FULL else num_query_tokens
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same demotion, with the padded count kept for the demoted descriptor
    # expect: SG103
    def propose_replaced_padded(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        desc = batch_desc if batch_desc in self.graphs else replace(batch_desc, cg_mode=CUDAGraphMode.NONE)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=desc.num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )


class MatchSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/cudagraph_utils.py (each mode's own branch), as a match
    # expect: clean
    def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        match batch_desc.cg_mode:
            case CUDAGraphMode.FULL:
                num_tokens = batch_desc.num_tokens
            case CUDAGraphMode.NONE | CUDAGraphMode.PIECEWISE:
                num_tokens = num_query_tokens
            case _:
                raise ValueError(f"not a runtime mode: {batch_desc.cg_mode}")
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same match with the graph modes in one case
    # expect: SG103
    def propose_graph_case(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        match batch_desc.cg_mode:
            case CUDAGraphMode.FULL | CUDAGraphMode.PIECEWISE:
                num_tokens = batch_desc.num_tokens
            case _:
                num_tokens = num_query_tokens
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )
