"""Draft forwards kept in the pre-marker API shape (0.5.6-era
``skip_attn_backend_init`` and FlashInfer ``begin_forward``), still served by
0.5.23's ModelRunner.forward through its deprecation mapping."""

from __future__ import annotations

from typing import Any, Dict

import torch

from sglang.srt.layers.attention.flashinfer_backend import DecodeMetadata
from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata as MLADecodeMetadata,
)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg40.config.settings import ParallelSettings, SpecSettings
from blindsg40.spec.components import MlpSyncPadder


class LegacyDraftDriver:
    def __init__(self, draft_model_runner: Any, draft_attn_backend: Any,
                 parallel: ParallelSettings, spec: SpecSettings):
        self.draft_model_runner = draft_model_runner
        self.draft_attn_backend = draft_attn_backend
        self.parallel = parallel
        self.spec = spec

    @classmethod
    def from_server_args(cls, server_args, draft_model_runner, draft_attn_backend):
        return cls(
            draft_model_runner,
            draft_attn_backend,
            ParallelSettings.from_server_args(server_args),
            SpecSettings.from_server_args(server_args),
        )

    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        outputs = []
        for _ in range(self.spec.num_steps - 1):
            logits_output = self.draft_model_runner.forward(
                forward_batch, skip_attn_backend_init=True
            ).logits_output
            outputs.append(logits_output)
        return outputs

    # expect: clean
    def draft_forward_no_dp(self, forward_batch: ForwardBatch):
        assert not self.parallel.enable_dp_attention, (
            "legacy draft driver pre-plans once; DP attention would pad after it"
        )
        forward_batch.forward_mode = ForwardMode.DECODE
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        outputs = []
        for _ in range(self.spec.num_steps - 1):
            outputs.append(
                self.draft_model_runner.forward(
                    forward_batch, skip_attn_backend_init=True
                ).logits_output
            )
        return outputs

    # expect: SG106
    def forward_draft_extend_after_decode(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        fwd_kwargs: Dict[str, Any] = {"skip_attn_backend_init": True}
        return self.draft_model_runner.forward(forward_batch, **fwd_kwargs).logits_output

    # expect: clean
    def forward_draft_extend_after_decode_gated(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        preplan = not self.parallel.enable_dp_attention
        if preplan:
            self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        fwd_kwargs: Dict[str, Any] = {"skip_attn_backend_init": preplan}
        return self.draft_model_runner.forward(forward_batch, **fwd_kwargs).logits_output


class LegacyWrapperPlanner:
    """Plans FlashInfer decode wrappers by hand (``begin_forward`` era)."""

    def __init__(self, model_runner: Any, attn_backend: Any, parallel: ParallelSettings):
        self.model_runner = model_runner
        self.attn_backend = attn_backend
        self.parallel = parallel

    def _begin_forward(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        kv_indptr = self.attn_backend.kv_indptr[0]
        kv_indptr[1 : bs + 1] = torch.cumsum(forward_batch.seq_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=forward_batch.seq_lens.device
        )
        for wrapper in self.attn_backend.decode_wrappers:
            wrapper.begin_forward(
                kv_indptr[: bs + 1],
                kv_indices,
                self.attn_backend.kv_last_page_len[:bs],
                self.attn_backend.num_qo_heads,
                self.attn_backend.num_kv_heads,
                self.attn_backend.head_dim,
                1,
                data_type=self.attn_backend.data_type,
                q_data_type=self.attn_backend.q_data_type,
            )
        self.attn_backend.forward_metadata = DecodeMetadata(self.attn_backend.decode_wrappers)

    # expect: SG106
    def decode(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self._begin_forward(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.model_runner.forward(forward_batch).logits_output

    # expect: clean
    def decode_dp_safe(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        if self.parallel.enable_dp_attention:
            return self.model_runner.forward(forward_batch).logits_output
        self._begin_forward(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.model_runner.forward(forward_batch).logits_output


class LegacyMLAWrapperPlanner:
    def __init__(self, model_runner: Any, mla_backend: Any):
        self.model_runner = model_runner
        self.mla_backend = mla_backend
        self.padder = MlpSyncPadder(model_runner)

    def _plan_decode_wrapper(self, forward_batch: ForwardBatch) -> None:
        self.mla_backend.indices_updater_decode.update(
            forward_batch.seq_lens,
            forward_batch.seq_lens_sum,
            decode_wrapper=self.mla_backend.decode_wrapper,
            init_metadata_replay=False,
            req_pool_indices=forward_batch.req_pool_indices,
            plan=forward_batch.kv_loc_plan,
        )
        self.mla_backend.forward_metadata = MLADecodeMetadata(self.mla_backend.decode_wrapper)

    # expect: SG106
    def decode(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self._plan_decode_wrapper(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self.padder.pad(forward_batch)
        out = self.model_runner.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )
        return self.padder.unpad(forward_batch, out)

    # expect: clean
    def decode_padded_first(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self.padder.pad(forward_batch)
        self._plan_decode_wrapper(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        out = self.model_runner.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )
        return self.padder.unpad(forward_batch, out)
