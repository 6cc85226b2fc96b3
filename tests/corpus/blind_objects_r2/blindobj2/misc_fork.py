# Assorted fork drafters (kept small; mostly experiments).
from typing import Any

import torch

from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

from blindobj2._pad import refresh_dcp_lens


class PropertyLensMTPSpeculator(MTPSpeculator):
    @property
    def fresh_dcp_lens(self) -> torch.Tensor | None:
        # Recomputes rank-local lengths from the drafter's current seq_lens.
        return refresh_dcp_lens(self, self._num_reqs)

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG104
    def _decode_md_warm_lens(self, num_reqs: int, batch_desc: BatchExecutionDescriptor,
                             bound: torch.Tensor, step: int) -> dict[str, Any] | None:
        self._num_reqs = num_reqs
        if self.fresh_dcp_lens is None:
            return self._build_uniform_attn_metadata(batch_desc, num_reqs, 1, bound, step)
        # Lengths are warm in input_buffers now; the helper will pick them up.
        return self._build_uniform_attn_metadata(batch_desc, num_reqs, 1, bound, step)

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _decode_md_property_lens(self, num_reqs: int,
                                 batch_desc: BatchExecutionDescriptor,
                                 bound: torch.Tensor, step: int) -> dict[str, Any] | None:
        self._num_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc, num_reqs, 1, bound, step,
            dcp_local_seq_lens=self.fresh_dcp_lens,
        )


class ClosureBuildMTPSpeculator(MTPSpeculator):
    # idiom: vllm v1/worker/gpu/attn_utils.py build_attn_metadata (per-group builder loop)
    # expect: SG101
    def _draft_md_closure(self, common_attn_metadata) -> dict[str, Any]:
        def _one(group):
            return group.get_metadata_builder(0).build(0, common_attn_metadata)

        out: dict[str, Any] = {}
        for groups in self.attn_groups:
            for group in groups:
                md = _one(group)
                out.update(dict.fromkeys(group.layer_names, md))
        return out

    # idiom: vllm v1/worker/gpu/attn_utils.py build_attn_metadata (per-group builder loop)
    # expect: clean
    def _draft_md_names(self, attn_metadata: dict[str, Any]) -> dict[str, Any]:
        # Re-key already built metadata onto the draft layers; no build here.
        out: dict[str, Any] = {}
        for groups in self.attn_groups:
            for group in groups:
                builder = group.get_metadata_builder(0)
                assert builder is not None
                src = next(
                    (attn_metadata[n] for n in group.layer_names if n in attn_metadata),
                    None,
                )
                out.update(dict.fromkeys(group.layer_names, src))
        return out
