"""SG103 cases whose value travels through dicts, tuples, ``**kwargs`` built
with ``dict(...)``, ``functools.partial`` stored on ``self`` and generators."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator

from .base import BlindARBase
from .padding import attn_step_counts, padded_step_counts, qsl_with_padding_request


class CountTableMTP(BlindARBase):
    # idiom: sgl-project/sglang python/sglang/srt/model_executor/forward_batch_info.py ForwardBatch.prepare_mlp_sync_batch
    # expect: SG103
    def _aligned_count_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        counts = dict(real=num_reqs, padded=desc.num_tokens)
        # Keep the padded count divisible by the attention-TP size.
        counts.update(padded=self.pad_policy.align_for_attn_tp(counts["padded"]))
        total = counts["padded"]
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: clean
    def _mode_keyed_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        by_mode = {CUDAGraphMode.FULL: desc.num_tokens}
        total = by_mode.get(desc.cg_mode, num_reqs)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/cudagraph_utils.py make_cudagraph_stats
    # expect: SG103
    def _size_pair_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        sizes = (num_reqs, desc.num_tokens)  # (unpadded, padded)
        total = sizes[-1]
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/cudagraph_utils.py make_cudagraph_stats
    # expect: clean
    def _size_pair_by_mode_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        sizes = (num_reqs, desc.num_tokens)  # (unpadded, padded)
        total = sizes[int(desc.cg_mode == CUDAGraphMode.FULL)]
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class DescTableEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/cudagraph_utils.py SpeculatorCudaGraphManager.specialize_spec_tokens
    # expect: SG103
    def _table_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        attn_descs = {
            "graph": replace(desc, cg_mode=CUDAGraphMode.FULL),
            "eager": desc,
        }
        # Padded batches are "graph shaped", whatever mode they were given.
        key = "graph" if desc.num_tokens != num_reqs else "eager"
        return self._build_uniform_attn_metadata(
            batch_desc=attn_descs[key],
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/cudagraph_utils.py SpeculatorCudaGraphManager.specialize_spec_tokens
    # expect: clean
    def _demoted_table_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        assert self.decode_cudagraph_manager is not None
        # A FULL descriptor without a captured graph is demoted to NONE,
        # as specialize_spec_tokens does; the helper then counts from
        # query_start_loc.
        attn_descs = {
            True: desc,
            False: replace(desc, cg_mode=CUDAGraphMode.NONE),
        }
        runnable = desc.cg_mode != CUDAGraphMode.FULL or (
            desc in self.decode_cudagraph_manager.graphs
        )
        return self._build_uniform_attn_metadata(
            batch_desc=attn_descs[runnable],
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class KwargsEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._run_model
    # expect: SG103
    def _kwargs_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        md_kwargs = dict(
            batch_desc=replace(desc, cg_mode=CUDAGraphMode.FULL),
            num_reqs=num_reqs,
            num_query_per_req=1,
        )
        md_kwargs.update(seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound)
        return self._build_uniform_attn_metadata(step=step, **md_kwargs)

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._run_model
    # expect: clean
    def _kwargs_real_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        md_kwargs = dict(num_reqs=num_reqs, batch_desc=desc, step=step)
        md_kwargs.update(
            query_start_loc_np=self.arange_np[: num_reqs + 1],
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
        )
        return self._build_attn_metadata(**md_kwargs)


class PartialEagle(BlindARBase):
    """functools.partial of the base helper kept on self."""

    def _bind_metadata_builders(self) -> None:
        self._uniform_md = functools.partial(
            self._build_uniform_attn_metadata, num_query_per_req=1
        )
        self._varlen_md = functools.partial(self._build_attn_metadata, step=0)

    def _bind_batch(self, desc: BatchExecutionDescriptor) -> None:
        self._batch_md = functools.partial(
            self._build_uniform_attn_metadata, batch_desc=desc, num_query_per_req=1
        )

    # idiom: sgl-project/sglang python/sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.init_forward_metadata
    # expect: SG103
    def _partial_padded_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        qsl = qsl_with_padding_request(self.arange_np, num_reqs, 1, desc.num_tokens)
        return self._varlen_md(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=qsl,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
        )

    # idiom: sgl-project/sglang python/sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.init_forward_metadata
    # expect: clean
    def _partial_bound_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        self._bind_batch(desc)
        return self._batch_md(
            num_reqs=num_reqs,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: sgl-project/sglang python/sglang/srt/layers/attention/flashinfer_backend.py FlashInferAttnBackend.init_forward_metadata_out_graph
    # expect: SG103
    def _partial_forced_loop(
        self,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        desc = self._dispatch_decode(num_reqs)
        self._step_md = functools.partial(
            self._build_uniform_attn_metadata,
            replace(desc, cg_mode=CUDAGraphMode.FULL),
        )
        slot_mappings = self._decode_slot_mappings(num_reqs, desc.num_tokens)
        for step in range(1, num_speculative_steps):
            attn_metadata = self._step_md(
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
            self._run_decode_step(
                num_reqs, desc, attn_metadata, slot_mappings, step, num_speculative_steps
            )


class GeneratorEagle(EagleSpeculator):
    """Counts produced by generators in padding.py and consumed here."""

    # idiom: sgl-project/sglang python/sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.common_template
    # expect: SG103
    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        attn_metadata = None
        slot_mappings_by_layer = None
        for step, num_step_tokens in padded_step_counts(
            batch_desc, num_speculative_steps
        ):
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                qsl = np.append(self.arange_np[: num_reqs + 1], num_step_tokens)
                attn_metadata = self._build_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    query_start_loc_np=qsl,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self.current_draft_step.fill_(step)
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                assert self.decode_cudagraph_manager is not None
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            else:
                self._generate_draft(
                    num_reqs,
                    batch_desc.num_tokens,
                    attn_metadata,
                    slot_mappings_by_layer,
                    num_tokens_across_dp,
                    batch_desc.cg_mode,
                    num_speculative_steps,
                )


class GuardedGeneratorEagle(EagleSpeculator):
    # idiom: sgl-project/sglang python/sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.common_template
    # expect: clean
    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        attn_metadata = None
        slot_mappings_by_layer = None
        for step, num_step_tokens in attn_step_counts(
            batch_desc, num_reqs, num_speculative_steps
        ):
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                qsl = np.append(self.arange_np[: num_reqs + 1], num_step_tokens)
                attn_metadata = self._build_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    query_start_loc_np=qsl,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self.current_draft_step.fill_(step)
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                assert self.decode_cudagraph_manager is not None
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            else:
                self._generate_draft(
                    num_reqs,
                    batch_desc.num_tokens,
                    attn_metadata,
                    slot_mappings_by_layer,
                    num_tokens_across_dp,
                    batch_desc.cg_mode,
                    num_speculative_steps,
                )
