"""SG103 cases whose padded count / forced descriptor travels through
attributes on ``self`` (also set in the base class in ``base.py``),
``@property`` and a config object's padding method."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.utils.math_utils import cdiv
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator

from .base import BlindARBase


class PinnedDescEagle(BlindARBase):
    """The forced-FULL descriptor is produced by the base class (other module)."""

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
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
        self.decode_desc = batch_desc
        self.decode_tokens_across_dp = num_tokens_across_dp
        self._pin_attn_desc_to_graph()
        attn_metadata = None
        slot_mappings = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings = self._decode_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    batch_desc=self.attn_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._run_decode_step(
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings,
                step,
                num_speculative_steps,
            )


class KeptDescEagle(BlindARBase):
    """Same loop, but the base keeps the dispatcher's descriptor."""

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
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
        self.decode_desc = batch_desc
        self.decode_tokens_across_dp = num_tokens_across_dp
        self._keep_attn_desc()
        attn_metadata = None
        slot_mappings = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings = self._decode_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    batch_desc=self.attn_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._run_decode_step(
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings,
                step,
                num_speculative_steps,
            )


class GraphShapeMTP(BlindARBase):
    """A FULL descriptor is rebuilt by hand from the stored padded count."""

    def _prepare_graph_attn(self, num_reqs: int) -> None:
        self._graph_attn_desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.FULL,
            num_tokens=self.padded_decode_tokens,
            num_reqs=self.padded_decode_tokens,
            uniform_token_count=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._multi_step_decode
    # expect: SG103
    def _draft_step_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        # self.decode_desc (dispatched by the base) may be NONE or PIECEWISE;
        # the hand-built FULL descriptor does not change that.
        return self._build_uniform_attn_metadata(
            batch_desc=self._graph_attn_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    def _prepare_eager_attn(self, num_reqs: int) -> None:
        # The standalone drafter's eager descriptor: NONE mode, so the helper
        # takes the token count from query_start_loc, whatever num_tokens is.
        self._eager_attn_desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.NONE,
            num_tokens=self.padded_decode_tokens,
            num_reqs=num_reqs,
            uniform_token_count=1,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._multi_step_decode
    # expect: clean
    def _eager_step_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=self._eager_attn_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class PaddedPropertyMTP(BlindARBase):
    @property
    def attn_token_count(self) -> int:
        # Whatever the dispatcher padded to, in every mode.
        return self.padded_decode_tokens

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG103
    def _decode_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        assert self.decode_desc is not None
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=self.decode_desc,
            query_start_loc_np=self._padding_qsl(num_reqs, self.attn_token_count),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class GuardedPropertyMTP(BlindARBase):
    @property
    def attn_token_count(self) -> int:
        desc = self.decode_desc
        if desc is not None and desc.cg_mode == CUDAGraphMode.FULL:
            return desc.num_tokens
        return self.real_decode_tokens

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: clean
    def _decode_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        assert self.decode_desc is not None
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=self.decode_desc,
            query_start_loc_np=self._padding_qsl(num_reqs, self.attn_token_count),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class BucketPolicyEagle(BlindARBase):
    """The padding comes from the config object ``self.pad_policy``."""

    # idiom: sgl-project/sglang python/sglang/srt/model_executor/runner/base_cuda_graph_runner.py BaseCudaGraphRunner._pad_to_bucket
    # expect: SG103
    def _bucketed_decode_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        total = self.pad_policy.pad_to_capture(num_reqs)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: sgl-project/sglang python/sglang/srt/model_executor/runner/base_cuda_graph_runner.py BaseCudaGraphRunner._pad_to_bucket
    # expect: clean
    def _policy_decode_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        total = self.pad_policy.real_or_padded(desc, num_reqs)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: sgl-project/sglang python/sglang/srt/speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner.execute
    # expect: clean
    def _bucketed_forward_only(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> None:
        # The bucket only decides which padded hidden-state rows get zeroed
        # (as SGLang does when bs != raw_bs); attention sees the dispatcher's
        # own descriptor.
        desc = self._dispatch_decode(num_reqs)
        bucket = self.pad_policy.pad_to_capture(num_reqs)
        if bucket != num_reqs:
            self.hidden_states[num_reqs:bucket].zero_()
        slot_mappings = self._decode_slot_mappings(num_reqs, desc.num_tokens)
        attn_metadata = self._build_uniform_attn_metadata(
            batch_desc=desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )
        self._run_decode_step(
            num_reqs,
            desc,
            attn_metadata,
            slot_mappings,
            step,
            self.num_speculative_steps,
        )


class ModeGuardsMTP(BlindARBase):
    """Guards that look at something other than this batch's descriptor."""

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.__init__
    # expect: SG103
    def _config_guarded_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        cudagraph_mode = self.vllm_config.compilation_config.cudagraph_mode
        # Having FULL graphs configured does not mean this batch replays one.
        if cudagraph_mode.has_full_cudagraphs():
            total = desc.num_tokens
        else:
            total = num_reqs
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose
    # expect: SG103
    def _prefill_guarded_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        # prefill_desc was stored by the base's _record_prefill; the decode
        # batch was dispatched separately and may run eagerly.
        assert self.prefill_desc is not None
        desc = self._dispatch_decode(num_reqs)
        total = (
            desc.num_tokens
            if self.prefill_desc.cg_mode == CUDAGraphMode.FULL
            else num_reqs
        )
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/attn_utils.py FastPrefillHelper.prepare
    # expect: SG103
    def _not_eager_guarded_metadata(
        self, input_batch: InputBatch, num_reqs: int
    ) -> dict[str, Any] | None:
        # Draft prefill over the target's (varlen) batch shape: the prefill
        # manager can hand back FULL, PIECEWISE or NONE.
        desc, _ = dispatch_cg_and_sync_dp(
            self.prefill_cudagraph_manager,
            num_reqs,
            input_batch.num_tokens_after_padding,
            None,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
        )
        # PIECEWISE passes this guard too.
        if desc.cg_mode != CUDAGraphMode.NONE:
            total = desc.num_tokens
        else:
            total = input_batch.num_tokens
        qsl = np.append(input_batch.query_start_loc_np[: num_reqs + 1], total)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=qsl,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )

    # idiom: vllm-project/vllm vllm/config/compilation.py CUDAGraphMode.has_full_cudagraphs
    # expect: clean
    def _runtime_mode_guarded_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        # A runtime descriptor's mode is NONE, PIECEWISE or FULL; only FULL
        # has full cudagraphs.
        total = desc.num_tokens if desc.cg_mode.has_full_cudagraphs() else num_reqs
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class PaddedRequestsDFlash(DFlashSpeculator):
    """Parallel drafting: the request count handed to the uniform helper."""

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/cudagraph_utils.py CudaGraphManager._init_candidates
    # expect: SG103
    def _query_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        # rounded_num_reqs = rounded_num_tokens // decode_query_len
        graph_num_reqs = cdiv(batch_desc.num_tokens, self.num_query_per_req)
        return self._build_uniform_attn_metadata(
            num_reqs=graph_num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: clean
    def _real_query_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        num_tokens_padded = batch_desc.num_tokens
        self._last_num_tokens_padded = num_tokens_padded
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
