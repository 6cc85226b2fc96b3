# SPDX-License-Identifier: Apache-2.0
"""Fork speculators built on vLLM's DraftModelSpeculator / DFlashSpeculator."""
import time
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

from . import harness

logger = init_logger(__name__)


class TracedDFlashSpeculator(DFlashSpeculator):
    @contextmanager
    def _timed(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            logger.debug("%s took %.3f ms", name, (time.perf_counter() - start) * 1e3)

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: clean
    def _build_uniform_attn_metadata(
        self,
        batch_desc,
        num_reqs,
        num_query_per_req,
        seq_lens_cpu_upper_bound,
        step,
        causal=True,
        dcp_local_seq_lens=None,
    ):
        assert num_reqs <= self.max_num_reqs
        with self._timed("draft_attn_metadata"):
            return super()._build_uniform_attn_metadata(
                batch_desc,
                num_reqs,
                num_query_per_req,
                seq_lens_cpu_upper_bound,
                step,
                causal,
                dcp_local_seq_lens,
            )


class TracedDFlashSpeculatorV2(TracedDFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: SG102
    def _build_uniform_attn_metadata(
        self,
        batch_desc,
        num_reqs,
        num_query_per_req,
        seq_lens_cpu_upper_bound,
        step,
        causal=False,
        dcp_local_seq_lens=None,
    ):
        with self._timed("draft_attn_metadata"):
            return DFlashSpeculator._build_uniform_attn_metadata(
                self,
                batch_desc,
                num_reqs,
                num_query_per_req,
                seq_lens_cpu_upper_bound,
                step,
                causal,
                dcp_local_seq_lens,
            )


class TolerantDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG102
    def _build_attn_metadata(
        self,
        num_reqs,
        batch_desc,
        query_start_loc_np,
        seq_lens_cpu_upper_bound,
        step,
        causal=True,
        dcp_local_seq_lens=None,
        slot_mappings=None,
    ):
        try:
            return super()._build_attn_metadata(
                num_reqs,
                batch_desc,
                query_start_loc_np,
                seq_lens_cpu_upper_bound,
                step,
                causal,
                dcp_local_seq_lens,
                slot_mappings,
            )
        except ValueError:
            # no draft attention layers on this rank
            logger.warning_once("skipping draft attention metadata")


class DPAwareDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG102
    def _build_attn_metadata(
        self,
        num_reqs,
        batch_desc,
        query_start_loc_np,
        seq_lens_cpu_upper_bound,
        step,
        causal=True,
        dcp_local_seq_lens=None,
        slot_mappings=None,
    ):
        if batch_desc.num_reqs is None:
            # keep DP ranks on the same request count
            batch_desc = replace(batch_desc, num_reqs=self.max_num_reqs)
        return super()._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
            slot_mappings,
        )


class PartialBuilderSpeculator(DraftModelSpeculator):
    def set_attn(self, *args, **kwargs) -> None:
        super().set_attn(*args, **kwargs)
        self._attn_builder = partial(
            build_attn_metadata,
            attn_groups=self.attn_groups,
            kv_cache_config=self.kv_cache_config,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: SG101
    def _rebuild_metadata(self, num_reqs: int, query_start_loc_np: np.ndarray) -> dict[str, Any]:
        num_tokens = int(query_start_loc_np[num_reqs])
        return self._attn_builder(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(query_start_loc_np[: num_reqs + 1]),
            max_query_len=int(np.diff(query_start_loc_np[: num_reqs + 1]).max()),
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: clean
    def _rebuild_metadata_fixed(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=1,
        )

    # idiom: vllm/v1/worker/gpu/attn_utils.py build_attn_metadata (per-group builder loop)
    # expect: SG101
    def _iter_group_metadata(self, common_attn_metadata):
        for groups in self.attn_groups:
            for group in groups:
                builder = group.get_metadata_builder()
                for layer_name in group.layer_names:
                    yield layer_name, builder.build(
                        common_prefix_len=0,
                        common_attn_metadata=common_attn_metadata,
                    )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py _multi_step_decode
    # expect: SG101
    def _draft_metadata_with_fallback(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        try:
            return self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
        except AssertionError:
            # older backends: build eagerly with the real count
            return build_attn_metadata(
                attn_groups=self.attn_groups,
                num_reqs=num_reqs,
                num_tokens=num_reqs,
                query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
                query_start_loc_cpu=torch.from_numpy(self.arange_np[: num_reqs + 1]),
                max_query_len=1,
                seq_lens=self.input_buffers.seq_lens[:num_reqs],
                max_seq_len=self.max_model_len,
                block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
                slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
                kv_cache_config=self.kv_cache_config,
            )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py _multi_step_decode
    # expect: clean
    def _draft_metadata_no_fallback(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        try:
            return self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
        except AssertionError:
            logger.exception("draft attention metadata build failed")
            raise

    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py propose
    # expect: SG101
    def _eager_prefill_metadata(self, num_reqs: int, query_start_loc_np: np.ndarray):
        return harness.build_eager_metadata(
            self.attn_groups,
            self.kv_cache_config,
            self.input_buffers,
            self.block_tables,
            num_reqs,
            query_start_loc_np,
            self.max_model_len,
        )

    # idiom: vllm/v1/worker/gpu/cudagraph_utils.py prepare_inputs_to_capture
    # expect: clean
    def _capture_metadata(self, batch_desc: BatchExecutionDescriptor):
        if batch_desc.cg_mode != CUDAGraphMode.FULL:
            return None
        num_reqs = batch_desc.num_reqs or batch_desc.num_tokens
        num_tokens = batch_desc.num_tokens
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(self.arange_np[: num_reqs + 1]),
            max_query_len=1,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            for_cudagraph_capture=True,
        )


class DCPDFlashSpeculator(DFlashSpeculator):
    def set_attn(self, *args, **kwargs) -> None:
        super().set_attn(*args, **kwargs)
        self._dcp_prep = partial(
            prepare_dcp_local_seq_lens,
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (pre-fix)
    # expect: SG104
    def _draft_metadata_dcp(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        local = None
        if self.dcp_size > 1:
            local = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            dcp_local_seq_lens=local,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: clean
    def _draft_metadata_dcp_fixed(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
    # expect: SG104
    def _advance_local_lens(self, num_reqs: int) -> None:
        if self.dcp_size > 1:
            self._dcp_prep(
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
    # expect: SG104
    def _refresh_after_rejection(self, num_reqs: int) -> None:
        if self.block_tables.cp_size > 1:
            harness.refresh_local_lens(self.input_buffers, self.block_tables, num_reqs)

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
    # expect: clean
    def _update_draft_decode_metadata(self, attn_metadata: dict[str, Any], num_reqs: int) -> None:
        with torch.profiler.record_function("dflash_update_decode_metadata"):
            super()._update_draft_decode_metadata(attn_metadata, num_reqs)

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: SG105
    def _draft_metadata_reuse_target_lens(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        extra: dict[str, Any] = {}
        if self.dcp_size > 1:
            # target model already prepared the rank-local lengths
            extra["dcp_local_seq_lens"] = self.input_buffers.dcp_local_seq_lens
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            **extra,
        )

    def prepare_context_anchor(self, *args, **kwargs):
        self._anchor_local_lens = self.input_buffers.dcp_local_seq_lens
        return super().prepare_context_anchor(*args, **kwargs)

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: SG105
    def _draft_metadata_anchor_lens(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            dcp_local_seq_lens=self._anchor_local_lens,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py propose
    # expect: SG105
    def _mixed_metadata_positional(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        return self._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            1,
            True,
            self.input_buffers.dcp_local_seq_lens,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py propose
    # expect: clean
    def _mixed_metadata_positional_fixed(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        return self._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            1,
            True,
            None,
        )


# idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
# expect: SG104
def _refresh_dcp_lens(speculator: DraftModelSpeculator, num_reqs: int) -> torch.Tensor | None:
    bt = speculator.block_tables
    return prepare_dcp_local_seq_lens(
        speculator.input_buffers.dcp_local_seq_lens,
        speculator.input_buffers.seq_lens,
        num_reqs,
        bt.cp_size,
        bt.cp_rank,
        bt.cp_interleave,
    )


# idiom: vllm/v1/worker/gpu/cudagraph_utils.py prepare_inputs_to_capture
# expect: clean
def _capture_dcp_metadata(speculator: DraftModelSpeculator, num_reqs: int) -> dict[str, Any]:
    bt = speculator.block_tables
    local = prepare_dcp_local_seq_lens(
        speculator.input_buffers.dcp_local_seq_lens,
        speculator.input_buffers.seq_lens,
        num_reqs,
        bt.cp_size,
        bt.cp_rank,
        bt.cp_interleave,
    )
    return build_attn_metadata(
        attn_groups=speculator.attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_reqs,
        query_start_loc_gpu=speculator.input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=torch.from_numpy(speculator.arange_np[: num_reqs + 1]),
        max_query_len=1,
        seq_lens=speculator.input_buffers.seq_lens[:num_reqs],
        dcp_local_seq_lens=local,
        max_seq_len=speculator.max_model_len,
        block_tables=[x[:num_reqs] for x in bt.input_block_tables],
        slot_mappings=bt.slot_mappings[:, :num_reqs],
        kv_cache_config=speculator.kv_cache_config,
        for_cudagraph_capture=True,
    )
