# SPDX-License-Identifier: Apache-2.0
"""Model states of the fork (target-model attention preparation).

The model runner calls ``prepare_attn(input_batch, batch_desc.cg_mode, ...)``:
FULL graphs replay the padded batch, PIECEWISE graphs and eager runs see the
real tokens only.
"""

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.model_states.default import DefaultModelState
from vllm.v1.worker.gpu.model_states.interface import ModelSpecificAttnMetadata
from vllm.v1.worker.utils import AttentionGroup


class _HostInputs(NamedTuple):
    query_start_loc_cpu: torch.Tensor
    query_start_loc_gpu: torch.Tensor
    max_query_len: int
    max_seq_len: int


class _HostInputsMixin:
    def _host_inputs(
        self, input_batch: InputBatch, num_reqs: int, for_capture: bool
    ) -> _HostInputs:
        max_query_len = input_batch.max_query_len
        if max_query_len is None:
            max_query_len = input_batch.num_scheduled_tokens.max().item()
        if for_capture:
            max_seq_len = self.max_model_len
        else:
            max_seq_len = input_batch.seq_lens_cpu_upper_bound[:num_reqs].max().item()
        return _HostInputs(
            torch.from_numpy(input_batch.query_start_loc_np[: num_reqs + 1]),
            input_batch.query_start_loc[: num_reqs + 1],
            max_query_len,
            max_seq_len,
        )


class AlignedSlotsModelState(_HostInputsMixin, DefaultModelState):
    """Model state whose slot mappings are always computed padded."""

    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; request count follows the mode, token count is taken padded on every path
    # expect: SG103
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        if cudagraph_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
        else:
            num_reqs = input_batch.num_reqs
        # slot_mappings were computed for num_tokens_after_padding; keep the
        # token count aligned with them.
        num_tokens = input_batch.num_tokens_after_padding
        host = self._host_inputs(input_batch, num_reqs, for_capture)
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            positions=input_batch.positions,
            is_prefilling=torch.from_numpy(input_batch.is_prefilling_np),
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
        )


class AnyGraphModelState(_HostInputsMixin, DefaultModelState):
    """Model state that treats every captured graph as a padded replay."""

    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; guard on CUDAGraphMode truthiness (PIECEWISE is truthy)
    # expect: SG103
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        if cudagraph_mode:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        host = self._host_inputs(input_batch, num_reqs, for_capture)
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )


class ExplicitModeModelState(_HostInputsMixin, DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/mamba_hybrid.py MambaHybridModelState.prepare_attn; one correlated flag drives both padded counts
    # expect: clean
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        full = cudagraph_mode == CUDAGraphMode.FULL
        num_reqs = input_batch.num_reqs_after_padding if full else input_batch.num_reqs
        num_tokens = (
            input_batch.num_tokens_after_padding if full else input_batch.num_tokens
        )
        host = self._host_inputs(input_batch, num_reqs, for_capture)
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            positions=input_batch.positions,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
        )


class RuntimeModeModelState(_HostInputsMixin, DefaultModelState):
    # idiom: vllm/config/compilation.py CUDAGraphMode.has_full_cudagraphs on a runtime mode (equals FULL only for NONE/PIECEWISE/FULL)
    # expect: clean
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        assert cudagraph_mode.is_valid_runtime_mode(), cudagraph_mode
        if cudagraph_mode.has_full_cudagraphs():
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        host = self._host_inputs(input_batch, num_reqs, for_capture)
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )


class TableDispatchModelState(_HostInputsMixin, DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; keyed lookup with FULL as the only padded key
    # expect: clean
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        padded = {
            CUDAGraphMode.FULL: (
                input_batch.num_reqs_after_padding,
                input_batch.num_tokens_after_padding,
            ),
        }
        num_reqs, num_tokens = padded.get(
            cudagraph_mode, (input_batch.num_reqs, input_batch.num_tokens)
        )
        host = self._host_inputs(input_batch, num_reqs, for_capture)
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )


class EagerKeyedModelState(_HostInputsMixin, DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; keyed lookup keyed on NONE only, PIECEWISE falls through to the padded default
    # expect: SG103
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        unpadded = {
            CUDAGraphMode.NONE: (input_batch.num_reqs, input_batch.num_tokens),
        }
        num_reqs, num_tokens = unpadded.get(
            cudagraph_mode,
            (input_batch.num_reqs_after_padding, input_batch.num_tokens_after_padding),
        )
        host = self._host_inputs(input_batch, num_reqs, for_capture)
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )


class DPAlignedModelState(_HostInputsMixin, DefaultModelState):
    """Model state that aligns MoE-heavy models to the DP-agreed shape."""

    _dp_sync: DPSyncState | None = None
    _dp_rank: int = 0

    def set_dp_sync(self, dp_sync: DPSyncState | None, dp_rank: int) -> None:
        self._dp_sync = dp_sync
        self._dp_rank = dp_rank

    # idiom: vllm/v1/worker/gpu/dp_utils.py DPSyncState.num_tokens_across_dp; DP-agreed per-rank count stored on self by another method, used for a non-FULL build
    # expect: SG103
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        if cudagraph_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
            sync = self._dp_sync
            if sync is not None and not sync.eager:
                # Ranks agreed on a graph shape; keep attention on it too.
                num_tokens = int(sync.num_tokens_across_dp[self._dp_rank])
        host = self._host_inputs(input_batch, num_reqs, for_capture)
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )


class KwargsModelState(_HostInputsMixin, DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; walrus-selected counts carried in a **kwargs dict
    # expect: clean
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        sizes: dict[str, int] = {
            "num_reqs": input_batch.num_reqs,
            "num_tokens": input_batch.num_tokens,
        }
        if replay := cudagraph_mode == CUDAGraphMode.FULL:
            sizes.update(
                num_reqs=input_batch.num_reqs_after_padding,
                num_tokens=input_batch.num_tokens_after_padding,
            )
        host = self._host_inputs(input_batch, sizes["num_reqs"], for_capture)
        kwargs: dict[str, Any] = dict(
            attn_groups=attn_groups,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )
        if not replay:
            kwargs["positions"] = input_batch.positions[: sizes["num_tokens"]]
        return build_attn_metadata(**sizes, **kwargs)


class FirstBatchModeModelState(_HostInputsMixin, DefaultModelState):
    """Model state that remembers whether the runner uses FULL graphs."""

    _graph_mode: CUDAGraphMode | None = None

    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; mode cached from the first batch on self and tested on later batches
    # expect: SG103
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        if self._graph_mode is None and not for_capture:
            self._graph_mode = cudagraph_mode
        if self._graph_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        host = self._host_inputs(input_batch, num_reqs, for_capture)
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )


class SplitPathModelState(_HostInputsMixin, DefaultModelState):
    def _build(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        num_tokens: int,
        block_tables: Sequence[torch.Tensor],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool,
        ubatch_idx: int,
    ) -> dict[str, Any]:
        host = self._host_inputs(input_batch, num_reqs, for_capture)
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )

    # idiom: vllm/v1/worker/gpu/model_states/encoder_only.py EncoderOnlyModelState.prepare_attn; early return on the unpadded path through a private helper method
    # expect: clean
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        rest = (block_tables, slot_mappings, attn_groups, kv_cache_config)
        if cudagraph_mode != CUDAGraphMode.FULL:
            return self._build(
                input_batch,
                input_batch.num_reqs,
                input_batch.num_tokens,
                *rest,
                for_capture,
                ubatch_idx,
            )
        return self._build(
            input_batch,
            input_batch.num_reqs_after_padding,
            input_batch.num_tokens_after_padding,
            *rest,
            for_capture,
            ubatch_idx,
        )


class DraftProbeModelState(_HostInputsMixin, DefaultModelState):
    """Target model state that also serves the verifier's probe pass."""

    # idiom: vllm/v1/worker/gpu/model_states/encoder_only.py _build_encoder_attn_metadata; a model state (not a speculator) method named like the speculator helper, handed the batch's mode
    # expect: clean
    def _build_attn_metadata(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: Sequence[torch.Tensor],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
    ) -> dict[str, Any]:
        if cudagraph_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs, num_tokens = input_batch.num_reqs, input_batch.num_tokens
        host = self._host_inputs(input_batch, num_reqs, for_capture=False)
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=host.query_start_loc_gpu,
            query_start_loc_cpu=host.query_start_loc_cpu,
            max_query_len=host.max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=host.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        )


# idiom: vllm/v1/worker/gpu/cudagraph_utils.py make_cudagraph_stats (batch_desc handed in); verifier metadata sized from the descriptor whatever its mode
# expect: SG103
def build_verify_metadata(
    batch_desc: BatchExecutionDescriptor,
    input_batch: InputBatch,
    block_tables: Sequence[torch.Tensor],
    slot_mappings: torch.Tensor,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_seq_len: int,
) -> dict[str, Any]:
    num_reqs = batch_desc.num_reqs or input_batch.num_reqs
    num_tokens = batch_desc.num_tokens
    query_start_loc_cpu = torch.from_numpy(input_batch.query_start_loc_np)
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_batch.query_start_loc,
        query_start_loc_cpu=query_start_loc_cpu,
        max_query_len=int(input_batch.num_scheduled_tokens.max()),
        seq_lens=input_batch.seq_lens,
        max_seq_len=max_seq_len,
        block_tables=block_tables,
        slot_mappings=slot_mappings,
        kv_cache_config=kv_cache_config,
        seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
    )


# idiom: vllm/v1/worker/gpu/cudagraph_utils.py make_cudagraph_stats (batch_desc handed in); descriptor count used only when the descriptor is a FULL replay
# expect: clean
def build_verify_metadata_checked(
    batch_desc: BatchExecutionDescriptor,
    input_batch: InputBatch,
    block_tables: Sequence[torch.Tensor],
    slot_mappings: torch.Tensor,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_seq_len: int,
) -> dict[str, Any]:
    if batch_desc.cg_mode == CUDAGraphMode.FULL:
        num_reqs = batch_desc.num_reqs or input_batch.num_reqs_after_padding
        num_tokens = batch_desc.num_tokens
    else:
        num_reqs = input_batch.num_reqs
        num_tokens = input_batch.num_tokens
    query_start_loc_cpu = torch.from_numpy(
        input_batch.query_start_loc_np[: num_reqs + 1]
    )
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=query_start_loc_cpu,
        max_query_len=int(input_batch.num_scheduled_tokens.max()),
        seq_lens=input_batch.seq_lens,
        max_seq_len=max_seq_len,
        block_tables=block_tables,
        slot_mappings=slot_mappings,
        kv_cache_config=kv_cache_config,
        seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
    )
