"""FlashInfer backend tweaks: tensor-core row alignment for decode and a
hand-rolled verify plan used by the disaggregated decode worker."""

from __future__ import annotations

import torch

from sglang.kernels.ops.attention.kv_indices import create_flashinfer_kv_indices_triton
from sglang.srt.layers.attention.flashinfer_backend import (
    DecodeMetadata,
    FlashInferAttnBackend,
    PrefillMetadata,
)
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg1._dp_utils import pad_rows, sync_batch_across_dp

_TC_ROWS = 8


class TCAlignedFlashInferBackend(FlashInferAttnBackend):
    """Decode with q rows rounded up to the tensor-core tile."""

    def _write_kv(self, k, v, layer, forward_batch, save_kv_cache):
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_kv_buffer(
                layer, KVWriteLoc.for_layer(forward_batch, layer), k, v
            )

    # expect: SG106
    def forward_decode_tc(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
    ):
        self.init_forward_metadata(forward_batch)
        decode_wrapper = self.forward_metadata.decode_wrappers[
            self._get_wrapper_idx(layer)
        ]
        self._write_kv(k, v, layer, forward_batch, save_kv_cache)
        q = q.contiguous().view(-1, layer.tp_q_head_num, layer.head_dim)
        rows = q.shape[0]
        q = pad_rows(q, (rows + _TC_ROWS - 1) // _TC_ROWS * _TC_ROWS)
        o = decode_wrapper.forward(
            q,
            self.token_to_kv_pool.get_kv_buffer(layer.layer_id),
            sm_scale=layer.scaling,
            logits_soft_cap=layer.logit_cap,
            k_scale=layer.k_scale_float,
            v_scale=layer.v_scale_float,
        )
        return o[:rows].reshape(-1, layer.tp_q_head_num * layer.head_dim)


class TileRowsFlashInferBackend(TCAlignedFlashInferBackend):
    # expect: clean
    def forward_decode_tc(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
    ):
        self._write_kv(k, v, layer, forward_batch, save_kv_cache)
        q = q.contiguous().view(-1, layer.tp_q_head_num, layer.head_dim)
        rows = q.shape[0]
        padded = (rows + _TC_ROWS - 1) // _TC_ROWS * _TC_ROWS
        q = pad_rows(q, padded)
        # Plan the padded rows: fill rows read one token from reserved slot 0.
        seq_lens = pad_rows(forward_batch.seq_lens, padded, value=1)
        req_pool_indices = pad_rows(forward_batch.req_pool_indices, padded, value=0)
        self.indices_updater_decode.update(
            seq_lens,
            None,
            int(seq_lens.sum().item()),
            decode_wrappers=self.decode_wrappers,
            encoder_lens=None,
            spec_info=None,
            req_pool_indices=req_pool_indices,
            plan=forward_batch.kv_loc_plan,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrappers)
        decode_wrapper = self.forward_metadata.decode_wrappers[
            self._get_wrapper_idx(layer)
        ]
        o = decode_wrapper.forward(
            q,
            self.token_to_kv_pool.get_kv_buffer(layer.layer_id),
            sm_scale=layer.scaling,
            logits_soft_cap=layer.logit_cap,
            k_scale=layer.k_scale_float,
            v_scale=layer.v_scale_float,
        )
        return o[:rows].reshape(-1, layer.tp_q_head_num * layer.head_dim)


def _decode_kv_stream(backend: FlashInferAttnBackend, forward_batch: ForwardBatch):
    updater = backend.indices_updater_decode
    bs = forward_batch.batch_size
    kv_indptr = updater.kv_indptr[0]
    kv_indptr[1 : bs + 1] = torch.cumsum(forward_batch.seq_lens, dim=0)
    kv_indptr = kv_indptr[: bs + 1]
    kv_indices = torch.empty(
        int(forward_batch.seq_lens_sum), dtype=torch.int32, device="cuda"
    )
    req_to_token = backend.req_to_token_pool.req_to_token
    create_flashinfer_kv_indices_triton[(bs,)](
        req_to_token,
        forward_batch.req_pool_indices,
        forward_batch.seq_lens,
        kv_indptr,
        None,
        kv_indices,
        req_to_token.stride(0),
    )
    return kv_indptr, kv_indices


# expect: SG106
def decode_with_manual_plan(model_runner: ModelRunner, forward_batch: ForwardBatch):
    """Eager decode that bypasses the indices updater (we need a custom
    split-kv tile that the updater does not expose)."""
    backend: FlashInferAttnBackend = model_runner.attn_backend
    updater = backend.indices_updater_decode
    bs = forward_batch.batch_size
    kv_indptr, kv_indices = _decode_kv_stream(backend, forward_batch)
    backend.decode_wrappers[0].begin_forward(
        kv_indptr,
        kv_indices,
        updater.kv_last_page_len[:bs],
        updater.num_qo_heads,
        updater.num_kv_heads,
        updater.head_dim,
        1,
        data_type=updater.data_type,
        q_data_type=updater.q_data_type,
        non_blocking=True,
        fixed_split_size=2048,
        disable_split_kv=False,
    )
    backend.forward_metadata = DecodeMetadata(backend.decode_wrappers)
    sync_batch_across_dp(forward_batch, model_runner)
    return model_runner.model.forward(
        forward_batch.input_ids, forward_batch.positions, forward_batch
    )


# expect: clean
def decode_with_split_tile(
    model_runner: ModelRunner, forward_batch: ForwardBatch
):
    backend: FlashInferAttnBackend = model_runner.attn_backend
    updater = backend.indices_updater_decode
    sync_batch_across_dp(forward_batch, model_runner)
    bs = forward_batch.batch_size
    kv_indptr, kv_indices = _decode_kv_stream(backend, forward_batch)
    backend.decode_wrappers[0].begin_forward(
        kv_indptr,
        kv_indices,
        updater.kv_last_page_len[:bs],
        updater.num_qo_heads,
        updater.num_kv_heads,
        updater.head_dim,
        1,
        data_type=updater.data_type,
        q_data_type=updater.q_data_type,
        non_blocking=True,
        fixed_split_size=2048,
        disable_split_kv=False,
    )
    backend.forward_metadata = DecodeMetadata(backend.decode_wrappers)
    return model_runner.model.forward(
        forward_batch.input_ids, forward_batch.positions, forward_batch
    )


def _verify_plan(backend: FlashInferAttnBackend, forward_batch: ForwardBatch):
    updater = backend.indices_updater_prefill
    spec_info = forward_batch.spec_info
    bs = forward_batch.batch_size
    ndt = spec_info.draft_token_num
    device = forward_batch.seq_lens.device
    qo_indptr = torch.arange(0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=device)
    kv_lens = forward_batch.seq_lens + ndt
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=device)
    kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
    kv_indices = torch.empty(
        int(forward_batch.seq_lens_sum) + bs * ndt, dtype=torch.int32, device=device
    )
    req_to_token = backend.req_to_token_pool.req_to_token
    create_flashinfer_kv_indices_triton[(bs,)](
        req_to_token,
        forward_batch.req_pool_indices,
        kv_lens,
        kv_indptr,
        None,
        kv_indices,
        req_to_token.stride(0),
    )
    backend.prefill_wrappers_verify[0].plan(
        qo_indptr,
        kv_indptr,
        kv_indices,
        updater.kv_last_page_len[:bs],
        updater.num_qo_heads,
        updater.num_kv_heads,
        updater.head_dim,
        1,
        q_data_type=updater.q_data_type,
        kv_data_type=updater.data_type,
        custom_mask=spec_info.custom_mask,
        non_blocking=True,
    )
    backend.forward_metadata = PrefillMetadata(
        backend.prefill_wrappers_verify, False, False
    )


# expect: SG106
def verify_with_manual_plan(model_runner: ModelRunner, forward_batch: ForwardBatch):
    assert forward_batch.forward_mode.is_target_verify()
    _verify_plan(model_runner.attn_backend, forward_batch)
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    return model_runner.model.forward(
        forward_batch.input_ids, forward_batch.positions, forward_batch
    )


# expect: clean
def verify_with_host_plan(
    model_runner: ModelRunner, forward_batch: ForwardBatch
):
    assert forward_batch.forward_mode.is_target_verify()
    if forward_batch.global_num_tokens_cpu is not None:
        # DP ranks go through the runner, which syncs first and plans after.
        return model_runner.forward(forward_batch).logits_output
    _verify_plan(model_runner.attn_backend, forward_batch)
    return model_runner.model.forward(
        forward_batch.input_ids, forward_batch.positions, forward_batch
    )
