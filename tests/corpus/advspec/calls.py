"""Adversarial corpus, SG103: padded counts followed into and out of callees: static, class and instance methods of
another module's class, explicit base-class calls, bound-method aliases, functools.partial, private helpers'
parameters, dataclass fields, dataclasses.replace, dicts and **kwargs, instance attributes."""

from __future__ import annotations

import functools
from dataclasses import replace

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

from advspec.policy import DraftStep, PaddingPolicy, dp_padded_tokens, graph_tokens


class PolicySpeculator(DraftModelSpeculator):
    def __init__(self, vllm_config, device) -> None:
        super().__init__(vllm_config, device)
        self.policy = PaddingPolicy(vllm_config.scheduler_config.max_num_batched_tokens)

    # idiom: a static helper of a policy class in another module (PaddingPolicy.padded_tokens)
    # expect: SG103
    def propose_static(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=PaddingPolicy.padded_tokens(batch_desc),
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: a classmethod of the same policy that chooses by mode (PaddingPolicy.tokens_for)
    # expect: clean
    def propose_classmethod(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=PaddingPolicy.tokens_for(batch_desc, num_query_tokens),
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/spec_decode/llm_base_proposer.py (`self.cudagraph_dispatcher.dispatch(...)`):
    #        an instance the speculator built in __init__, asked for the size to run
    # expect: SG103
    def propose_instance(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        num_tokens = self.policy.run_size(batch_desc)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same instance, asked for the attention size (it tests has_full_cudagraphs)
    # expect: clean
    def propose_instance_checked(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np, seq_lens):
        num_tokens = self.policy.attention_size(batch_desc, query_start_loc_np)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: a module function of another module that chooses by mode (graph_tokens)
    # expect: clean
    def propose_module_function(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=graph_tokens(batch_desc, num_query_tokens),
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: a module function of another module that reads this rank's DP-synced count (dp_padded_tokens)
    # expect: SG103
    def propose_dp_function(self, num_reqs, batch_sync, seq_lens):
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=dp_padded_tokens(batch_sync.num_tokens_across_dp, self.dp_rank),
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )


class PaddedBaseSpeculator(DraftModelSpeculator):
    def _step_tokens(self, batch_desc, num_query_tokens):
        return batch_desc.num_tokens


class ExplicitBaseSpeculator(PaddedBaseSpeculator):
    def _step_tokens(self, batch_desc, num_query_tokens):
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            return batch_desc.num_tokens
        return num_query_tokens

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py RSWASpec.merge (`FullAttentionSpec.merge(specs)`):
    #        the base's helper called explicitly, skipping this class's override
    # expect: SG103
    def propose_base_helper(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        num_tokens = PaddedBaseSpeculator._step_tokens(self, batch_desc, num_query_tokens)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the override, through self
    # expect: clean
    def propose_own_helper(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=self._step_tokens(batch_desc, num_query_tokens),
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )


class AliasSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py (0.33.0) DraftModelSpeculator
    #        (`sample = ... partial(self.draft_watermarker.sample, num_steps=num_steps)`): a bound helper in a local
    # expect: SG103
    def propose_bound_alias(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        build = self._build_draft_attn_metadata
        return build(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=batch_desc.num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same module, functools.partial binding the sizes of the batch once for every step
    # expect: SG103
    def propose_partial(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens, num_steps):
        build = functools.partial(
            self._build_draft_attn_metadata,
            num_reqs=num_reqs,
            num_reqs_padded=batch_desc.num_reqs or num_reqs,
            num_tokens_padded=batch_desc.num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
        )
        return [build(step=step) for step in range(1, num_steps)]

    # idiom: the same partial with the count chosen by mode
    # expect: clean
    def propose_partial_checked(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        count = batch_desc.num_tokens if batch_desc.cg_mode == CUDAGraphMode.FULL else num_query_tokens
        build = functools.partial(self._build_draft_attn_metadata, num_tokens_padded=count)
        return build(num_reqs=num_reqs, num_reqs_padded=num_reqs, seq_lens_cpu_upper_bound=seq_lens, step=1)

    def _make_metadata(self, num_reqs, num_tokens, seq_lens, step):
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py (0.28.0)
    #        AutoRegressiveSpeculator._generate_draft: a private helper whose parameter becomes the count
    # expect: SG103
    def propose_private_helper(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        return self._make_metadata(num_reqs, batch_desc.num_tokens, seq_lens, 1)

    # idiom: the same helper handed the real count
    # expect: clean
    def propose_private_helper_real(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np, seq_lens):
        num_tokens = int(query_start_loc_np[num_reqs])
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_tokens = batch_desc.num_tokens
        return self._make_metadata(num_reqs, num_tokens, seq_lens, 1)


class RecordSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/dp_utils.py DPSyncState: a dataclass carrying the step's sizes
    # expect: SG103
    def propose_record(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        step = DraftStep(num_reqs=num_reqs, num_tokens=batch_desc.num_tokens)
        return self._build_draft_attn_metadata(
            num_reqs=step.num_reqs,
            num_reqs_padded=step.num_reqs,
            num_tokens_padded=step.num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=step.step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/cudagraph_utils.py
    #        (`replace(desc, ...)`): the descriptor's count replaced by the real one outside FULL graphs
    # expect: clean
    def propose_replaced(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        if batch_desc.cg_mode != CUDAGraphMode.FULL:
            batch_desc = replace(batch_desc, num_tokens=num_query_tokens)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=batch_desc.num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: a dict of the step's sizes, the padded one picked by key
    # expect: SG103
    def propose_sizes_dict(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        sizes = {"padded": batch_desc.num_tokens, "real": num_query_tokens}
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=sizes["padded"],
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same dict, the real one picked by key
    # expect: clean
    def propose_sizes_dict_real(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        sizes = {"padded": batch_desc.num_tokens, "real": num_query_tokens}
        key = "padded" if batch_desc.cg_mode == CUDAGraphMode.FULL else "real"
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=sizes[key],
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py (0.28.0)
    #        (`model_inputs = dict(...)` then `self.model(**model_inputs)`), for the metadata helper's arguments
    # expect: SG103
    def propose_kwargs(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
        kwargs = dict(num_reqs=num_reqs, num_reqs_padded=num_reqs, seq_lens_cpu_upper_bound=seq_lens)
        kwargs["num_tokens_padded"] = batch_desc.num_tokens
        return self._build_draft_attn_metadata(**kwargs, step=1)

    # idiom: the same **kwargs, updated with the real count outside FULL graphs
    # expect: clean
    def propose_kwargs_real(self, num_reqs, batch_desc: BatchExecutionDescriptor, num_query_tokens, seq_lens):
        kwargs = dict(num_reqs=num_reqs, num_reqs_padded=num_reqs, num_tokens_padded=batch_desc.num_tokens)
        if batch_desc.cg_mode != CUDAGraphMode.FULL:
            kwargs.update(num_tokens_padded=num_query_tokens)
        return self._build_draft_attn_metadata(**kwargs, seq_lens_cpu_upper_bound=seq_lens, step=1)


class StatefulSpeculator(DraftModelSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py (0.28.0) DFlashSpeculator
    #        (sizes kept on self between the prepare and the build steps)
    def prepare(self, batch_desc: BatchExecutionDescriptor, num_query_tokens):
        self.num_tokens_padded = batch_desc.num_tokens
        self.num_query_tokens = num_query_tokens
        self.full_graph = batch_desc.cg_mode == CUDAGraphMode.FULL

    # expect: SG103
    def build(self, num_reqs, seq_lens):
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=self.num_tokens_padded,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )

    # idiom: the same state, read with the mode it was prepared for
    # expect: clean
    def build_checked(self, num_reqs, seq_lens):
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=self.num_tokens_padded if self.full_graph else self.num_query_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )
