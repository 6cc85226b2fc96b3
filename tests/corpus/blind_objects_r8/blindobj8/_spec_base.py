# SPDX-License-Identifier: Apache-2.0
"""State shared by the fork's speculator bases (buffers and attention wiring).

``SpeculatorStateMixin`` is not a speculator by itself: it only owns the
buffers and attention groups that every draft family needs, so the bases in
``fork_bases`` can pick the metadata helpers they want on top of it.
"""

from typing import NamedTuple

import numpy as np
import torch

from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import init_attn_backend
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.utils import AttentionGroup

from blindobj8._dcp import RankLocalLens

logger = init_logger(__name__)


class DraftBatchViews(NamedTuple):
    query_start_loc_cpu: torch.Tensor
    max_query_len: int
    block_tables: list[torch.Tensor]
    seq_lens_cpu_upper_bound: torch.Tensor


class SpeculatorStateMixin:
    def __init__(self, vllm_config: VllmConfig, device: torch.device) -> None:
        self.vllm_config = vllm_config
        self.device = device
        assert vllm_config.speculative_config is not None
        self.speculative_config = vllm_config.speculative_config
        self.num_speculative_steps = self.speculative_config.num_speculative_tokens
        self.max_num_reqs = vllm_config.scheduler_config.max_num_seqs
        self.max_num_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        self.draft_max_seq_len = self.max_model_len

        parallel_config = vllm_config.parallel_config
        self.dp_size = parallel_config.data_parallel_size
        self.dp_rank = parallel_config.data_parallel_rank
        self.dcp_size = parallel_config.decode_context_parallel_size
        self.cudagraph_mode = vllm_config.compilation_config.cudagraph_mode
        self._capture_sizes = sorted(
            vllm_config.compilation_config.cudagraph_capture_sizes or [1]
        )

        self.input_buffers = InputBuffers(
            max_num_reqs=self.max_num_reqs,
            max_num_tokens=self.max_num_tokens,
            device=device,
        )
        self.idx_mapping = torch.zeros(
            self.max_num_reqs, dtype=torch.int64, device=device
        )
        self.draft_tokens = torch.zeros(
            self.max_num_reqs,
            self.num_speculative_steps,
            dtype=torch.int64,
            device=device,
        )
        self.current_draft_step = torch.tensor(0, dtype=torch.int64, device=device)
        self.arange_np = np.arange(self.max_num_reqs + 1, dtype=np.int32)
        self.draft_is_prefilling = torch.zeros(self.max_num_reqs, dtype=torch.bool)
        self.draft_attn_layer_names: set[str] = set()
        self.supports_decode_metadata_update = False
        self.decode_cudagraph_manager = None

    @property
    def max_model_len(self) -> int:
        return self.vllm_config.model_config.max_model_len

    def set_attn(
        self,
        model_state: ModelState,
        kv_cache_config: KVCacheConfig,
        block_tables: BlockTables,
        target_input_buffers: InputBuffers,
        target_attn_groups: list[list[AttentionGroup]],
    ) -> None:
        self.model_state = model_state
        self.kv_cache_config = kv_cache_config
        self.attn_groups, self.attn_cg_support, _ = init_attn_backend(
            kv_cache_config,
            self.vllm_config,
            self.device,
            active_layer_names=self.draft_attn_layer_names,
        )
        self.block_tables = block_tables
        self.target_input_buffers = target_input_buffers
        self.target_attn_groups = target_attn_groups
        self._rank_local = RankLocalLens(self.input_buffers, block_tables, self.dcp_size)

    def _draft_batch_views(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> DraftBatchViews:
        """Host-side views shared by every draft metadata build.

        Token counts and DCP lengths are left to the caller.
        """
        query_start_loc_cpu = torch.empty(num_reqs_padded + 1, dtype=torch.int32)
        query_start_loc_cpu[: num_reqs + 1] = torch.from_numpy(
            query_start_loc_np[: num_reqs + 1]
        )
        query_start_loc_cpu[num_reqs:] = query_start_loc_cpu[num_reqs]
        max_query_len = int((query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]).max())
        block_tables = [
            x[:num_reqs_padded] for x in self.block_tables.input_block_tables
        ]
        upper_bound = torch.zeros(num_reqs_padded, dtype=torch.int32, device="cpu")
        torch.add(seq_lens_cpu_upper_bound[:num_reqs], step, out=upper_bound[:num_reqs])
        upper_bound[:num_reqs].clamp_(max=self.max_model_len)
        return DraftBatchViews(query_start_loc_cpu, max_query_len, block_tables, upper_bound)
