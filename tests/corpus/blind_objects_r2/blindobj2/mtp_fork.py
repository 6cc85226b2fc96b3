# MTP drafter variants: DCP-aware metadata paths.
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

from blindobj2._pad import DcpLenCache, direct_build, refresh_dcp_lens, uniform_qsl


@dataclass
class _StepInputs:
    num_reqs: int
    batch_desc: BatchExecutionDescriptor
    seq_lens_cpu_upper_bound: torch.Tensor
    step: int


class DcpMTPSpeculator(MTPSpeculator):
    """MTP drafter tuned for decode-context-parallel deployments."""

    def set_attn(self, *args, **kwargs) -> None:
        super().set_attn(*args, **kwargs)
        self._dcp_cache = DcpLenCache()
        self._prepare_dcp = partial(
            prepare_dcp_local_seq_lens,
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
        )

    def _dcp_args(self) -> tuple[int, int, int]:
        return (
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: SG104
    def _decode_md_dcp_eager(self, inp: _StepInputs) -> dict[str, Any] | None:
        if self.dcp_size > 1:
            # Refresh rank-local lengths for the advanced draft position.
            self._prepare_dcp(inp.num_reqs, *self._dcp_args())
        return self._build_uniform_attn_metadata(
            batch_desc=inp.batch_desc,
            num_reqs=inp.num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=inp.seq_lens_cpu_upper_bound,
            step=inp.step,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: clean
    def _decode_md_dcp_passed(self, inp: _StepInputs) -> dict[str, Any] | None:
        dcp_lens = None
        if self.dcp_size > 1:
            dcp_lens = self._prepare_dcp(inp.num_reqs, *self._dcp_args())
        return self._build_uniform_attn_metadata(
            batch_desc=inp.batch_desc,
            num_reqs=inp.num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=inp.seq_lens_cpu_upper_bound,
            step=inp.step,
            dcp_local_seq_lens=dcp_lens,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
    # expect: SG104
    def _update_draft_decode_metadata(
        self, attn_metadata: dict[str, Any], num_reqs: int
    ) -> None:
        if self.block_tables.cp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        super()._update_draft_decode_metadata(attn_metadata, num_reqs)

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG105
    def _multi_step_md_cached_dcp(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> list[dict[str, Any] | None]:
        out = []
        dcp_lens = refresh_dcp_lens(self, num_reqs)
        for step in range(1, num_speculative_steps):
            md = self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
                dcp_local_seq_lens=dcp_lens,
            )
            out.append(md)
            self.current_draft_step.fill_(step)
            # Advances input_buffers.positions / seq_lens by one.
            self._generate_draft(
                num_reqs, batch_desc.num_tokens, md, None, None,
                batch_desc.cg_mode, num_speculative_steps,
            )
        return out

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _multi_step_md_fresh_dcp(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> list[dict[str, Any] | None]:
        out = []
        for step in range(1, num_speculative_steps):
            dcp_lens = refresh_dcp_lens(self, num_reqs)
            md = self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
                dcp_local_seq_lens=dcp_lens,
            )
            out.append(md)
            self.current_draft_step.fill_(step)
            # Advances input_buffers.positions / seq_lens by one.
            self._generate_draft(
                num_reqs, batch_desc.num_tokens, md, None, None,
                batch_desc.cg_mode, num_speculative_steps,
            )
        return out

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose
    # expect: SG105
    def _first_decode_md_from_target(
        self,
        input_batch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        # Target already computed rank-local lengths for this batch; reuse them.
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=1,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose
    # expect: clean
    def _first_decode_md_own_lens(
        self,
        input_batch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        # Target's lengths are stale after rejection; let the helper recompute
        # from the drafter's own seq_lens.
        assert input_batch.dcp_local_seq_lens is None or self.dcp_size > 1
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=1,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG105
    def _step_md_from_cache(self, inp: _StepInputs) -> dict[str, Any] | None:
        kwargs = dict(
            batch_desc=inp.batch_desc,
            num_reqs=inp.num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=inp.seq_lens_cpu_upper_bound,
            step=inp.step,
        )
        if self.dcp_size > 1:
            # Reuse whatever the previous step computed.
            kwargs["dcp_local_seq_lens"] = self._dcp_cache.get(inp.step - 1)
        md = self._build_uniform_attn_metadata(**kwargs)
        return md

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: clean
    def _step_md_into_cache(self, inp: _StepInputs) -> dict[str, Any] | None:
        kwargs = dict(
            batch_desc=inp.batch_desc,
            num_reqs=inp.num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=inp.seq_lens_cpu_upper_bound,
            step=inp.step,
        )
        if self.dcp_size > 1:
            lens = refresh_dcp_lens(self, inp.num_reqs)
            self._dcp_cache.put(inp.step, lens)
            kwargs["dcp_local_seq_lens"] = lens
        return self._build_uniform_attn_metadata(**kwargs)


class DirectBuildMTPSpeculator(MTPSpeculator):
    """MTP drafter that hand-assembles draft metadata for speed."""

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG101
    def _fast_decode_md(
        self, num_reqs: int, batch_desc: BatchExecutionDescriptor
    ) -> dict[str, Any]:
        qsl_np = uniform_qsl(self.arange_np, num_reqs, 1)
        qsl_cpu = torch.from_numpy(qsl_np).to(torch.int32)
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=qsl_cpu,
            max_query_len=1,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
            kv_cache_config=self.kv_cache_config,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: clean
    def _fast_decode_md_helper(
        self, num_reqs: int, batch_desc: BatchExecutionDescriptor
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=self.input_buffers.seq_lens[:num_reqs].cpu(),
            step=0,
        )

    # idiom: vllm v1/worker/gpu/attn_utils.py build_attn_metadata (per-group builder loop)
    # expect: SG101
    def _rebuild_groups(self, common_attn_metadata) -> dict[str, Any]:
        attn_metadata: dict[str, Any] = {}
        for groups in self.attn_groups:
            for group in groups:
                builder = group.get_metadata_builder()
                md = builder.build(
                    common_prefix_len=0,
                    common_attn_metadata=common_attn_metadata,
                )
                for name in group.layer_names:
                    attn_metadata[name] = md
        return attn_metadata

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
    # expect: clean
    def _refresh_groups(self, attn_metadata: dict[str, Any], num_reqs: int) -> None:
        # In-place refresh of already built decode metadata; nothing is rebuilt.
        if not self.supports_decode_metadata_update:
            return
        for groups in self.attn_groups:
            for group in groups:
                group.update_draft_decode_metadata(attn_metadata)

    # idiom: vllm v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill
    # expect: SG101
    def _prefill_md_via_module_helper(self, input_batch, num_reqs: int):
        qsl_cpu = torch.from_numpy(input_batch.query_start_loc_np[: num_reqs + 1])
        n = int(input_batch.query_start_loc_np[num_reqs])
        return direct_build(self, num_reqs, n, qsl_cpu)

    # idiom: vllm v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill
    # expect: clean
    def _prefill_md_via_base(self, input_batch, num_reqs: int):
        n = int(input_batch.query_start_loc_np[num_reqs])
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE, num_tokens=n, num_reqs=num_reqs
            ),
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )

    # idiom: vllm v1/worker/gpu/attn_utils.py build_attn_metadata (AttentionGroup.build_metadata)
    # expect: SG101
    def _build_each_group(self, common_attn_metadata) -> dict[str, Any]:
        return {
            name: group.build_metadata(common_attn_metadata, 0)
            for groups in self.attn_groups
            for group in groups
            for name in group.layer_names
        }
