"""Reproduces the first seed (DFlash under DP>1) against whichever vLLM this interpreter imports.

Run as a script by test_seed1_draft_tokens.py: once with vLLM 0.28.0's code first on PYTHONPATH, once with
the installed vLLM 0.33.0. It builds a batch of 12 requests x 4 draft query tokens (48 real tokens) on DP
rank 0 while the peer DP rank has 52 tokens, so the DP sync pads this rank's descriptor to 52, then calls
the DFlash speculator's shared draft-metadata helper the way that version's `DFlashSpeculator.propose` does.
Prints one JSON object per CUDA-graph mode.
"""

from __future__ import annotations

import json
import os
import sys
import types

import numpy as np
import torch

NUM_REQS, PER_REQ, PEER_TOKENS, DP_SIZE = 12, 4, 52, 2
REAL = NUM_REQS * PER_REQ


def main() -> None:
    os.environ["VLLM_SPECGUARD"] = sys.argv[1] if len(sys.argv) > 1 else "1"
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.worker.gpu import dp_utils
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator as dflash

    import specguard.runtime as sg

    sg.register()  # after dflash bound dispatch_cg_and_sync_dp: the guard must rebind it there too
    installed, skipped = sg.installed_checks()

    class Manager:
        """A CUDA-graph manager with graphs of one mode, captured for every size."""

        def __init__(self, mode: str) -> None:
            self.mode = CUDAGraphMode[mode]

        def dispatch(self, num_reqs, num_tokens, uniform_token_count, num_active_loras=0, max_query_len=None):
            full = self.mode == CUDAGraphMode.FULL
            reqs = -(-num_tokens // uniform_token_count) if full else None  # PIECEWISE pads no requests
            return BatchExecutionDescriptor(
                cg_mode=self.mode,
                num_tokens=num_tokens,
                num_reqs=reqs,
                uniform_token_count=uniform_token_count,
            )

    def peer_all_reduce(tensor, group=None):
        # The other DP rank's row of vLLM's 4 x dp_size sync tensor: its tokens, graph mode, uniform count.
        tensor[0][1] = PEER_TOKENS
        tensor[1][1] = tensor[1][0]
        tensor[2][1] = PER_REQ
        tensor[3][1] = -1

    dp_utils.get_dp_group = lambda: types.SimpleNamespace(cpu_group=None)
    dp_utils.dist = types.SimpleNamespace(all_reduce=peer_all_reduce)

    def speculator():
        spec = object.__new__(dflash.DFlashSpeculator)
        groups = 1
        spec.__dict__.update(
            num_query_per_req=PER_REQ,
            draft_attn_layer_names={"draft.layers.0.attn"},
            draft_max_seq_len=4096,
            dp_size=DP_SIZE,
            dp_rank=0,
            dcp_size=1,
            attn_groups=[],
            kv_cache_config=types.SimpleNamespace(kv_cache_groups=[]),
            arange=torch.arange(65, dtype=torch.int32),
            arange_np=np.arange(65, dtype=np.int32),
            draft_is_prefilling=torch.zeros(64, dtype=torch.bool),
            block_tables=types.SimpleNamespace(
                input_block_tables=[torch.zeros(64, 8, dtype=torch.int32)],
                slot_mappings=torch.zeros(groups, 256, dtype=torch.int64),
                cp_size=1,
                cp_rank=0,
                cp_interleave=1,
            ),
            input_buffers=types.SimpleNamespace(
                query_start_loc=torch.zeros(65, dtype=torch.int32),
                seq_lens=torch.zeros(64, dtype=torch.int32),
                positions=torch.zeros(256, dtype=torch.int64),
                dcp_local_seq_lens=torch.zeros(64, dtype=torch.int32),
            ),
        )
        if isinstance(getattr(type(spec), "max_model_len", None), property):  # 0.33.0 reads it from the config
            spec.vllm_config = types.SimpleNamespace(model_config=types.SimpleNamespace(max_model_len=4096))
        else:
            spec.max_model_len = 4096
        return spec

    upper = torch.full((64,), 100, dtype=torch.int32)
    old_style = "_build_draft_attn_metadata" in vars(dflash.DFlashSpeculator) or not hasattr(
        dflash.DFlashSpeculator, "_build_uniform_attn_metadata"
    )
    for mode in ("PIECEWISE", "FULL", "NONE"):
        sg.reset_stats()
        spec = speculator()
        result = {"mode": mode, "installed": installed, "skipped": skipped}
        try:
            if old_style:  # 0.28.0 DFlashSpeculator.propose
                desc, _ = dflash.dispatch_cg_and_sync_dp(
                    Manager(mode),
                    NUM_REQS,
                    REAL,
                    uniform_token_count=PER_REQ,
                    dp_size=DP_SIZE,
                    dp_rank=0,
                    need_eager=mode == "NONE",
                )
                result["descriptor_tokens"] = desc.num_tokens
                spec._build_draft_attn_metadata(
                    num_reqs=NUM_REQS,
                    num_reqs_padded=desc.num_reqs or NUM_REQS,
                    num_tokens_padded=desc.num_tokens,
                    seq_lens_cpu_upper_bound=upper,
                    step=PER_REQ,
                    causal=False,
                )
            else:  # 0.33.0 DFlashSpeculator.propose, handed the same DP-synced descriptor
                padded = REAL if mode == "NONE" else PEER_TOKENS
                desc = Manager(mode).dispatch(NUM_REQS, padded, PER_REQ)
                result["descriptor_tokens"] = desc.num_tokens
                spec._build_uniform_attn_metadata(
                    batch_desc=desc,
                    num_reqs=NUM_REQS,
                    num_query_per_req=PER_REQ,
                    seq_lens_cpu_upper_bound=upper,
                    step=PER_REQ,
                    causal=False,
                )
            result["raised"] = None
        except AssertionError as exc:
            result["raised"] = type(exc).__name__
            result["message"] = str(exc)
        result["stats"] = sg.stats()
        print(json.dumps(result))


if __name__ == "__main__":
    main()
