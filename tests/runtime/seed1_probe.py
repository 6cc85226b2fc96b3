"""Reproduces the first seed (DFlash under DP>1) against whichever vLLM this interpreter imports.

Run as a script by test_seed1_draft_tokens.py: once with vLLM 0.28.0's code first on PYTHONPATH, once with
the installed vLLM 0.33.0. It builds a batch of 12 requests x 4 draft query tokens (48 real tokens) on DP
rank 0 while the peer DP rank has 52 tokens, so the DP sync pads this rank's descriptor to 52, then calls
the DFlash speculator's shared draft-metadata helper the way that version's `DFlashSpeculator.propose` does.
The draft KV-cache group has one attention group whose builder is an out-of-tree one defined here (after
the guard is on), deployed with FULL and PIECEWISE graphs: G0 checks what reaches it. Prints one JSON object
per guard mode and CUDA-graph mode, then one for the V2 runner's build_attn_metadata called directly with
the seed's numbers.
"""

from __future__ import annotations

import json
import os
import types

import numpy as np
import torch

NUM_REQS, PER_REQ, PEER_TOKENS, DP_SIZE = 12, 4, 52, 2
REAL = NUM_REQS * PER_REQ


def main() -> None:
    os.environ["VLLM_SPECGUARD"] = "1"
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.attention.backend import AttentionMetadataBuilder
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.worker.gpu import attn_utils, dp_utils
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator as dflash
    from vllm.v1.worker.utils import AttentionGroup

    import specguard.runtime as sg
    from specguard.runtime import install
    from specguard.runtime.errors import SpecGuardViolation

    sg.register()  # after dflash bound dispatch_cg_and_sync_dp: the guard must rebind it there too
    installed, skipped = sg.installed_checks()
    print(json.dumps({"guard": "raise", "mode": "startup", "line": install.startup_line("raise")}))
    kv_spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)
    kv_cache_config = types.SimpleNamespace(kv_cache_groups=[types.SimpleNamespace(kv_cache_spec=kv_spec)])
    seen: list[int] = []

    class ProbeBuilder(AttentionMetadataBuilder):
        """An out-of-tree backend's builder: records the token count it is handed."""

        def __init__(self) -> None:
            self.layer_names = ["draft.layers.0.attn"]
            self.vllm_config = types.SimpleNamespace(  # a GPU deployment with FULL and PIECEWISE graphs
                compilation_config=types.SimpleNamespace(
                    cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE, cudagraph_capture_sizes=[4, 8, 16, 32, 64]
                )
            )

        def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
            seen.append(common_attn_metadata.num_actual_tokens)
            return None

    group = AttentionGroup(
        backend=None, layer_names=["draft.layers.0.attn"], kv_cache_spec=kv_spec, kv_cache_group_id=0
    )
    group.metadata_builders = [ProbeBuilder()]

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
            attn_groups=[[group]],
            kv_cache_config=kv_cache_config,
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
                # the device buffer a GPU kernel fills: on the meta device it has a shape and no values, as
                # the guard sees a CUDA buffer (a zeroed CPU stand-in would be a host copy that disagrees)
                query_start_loc=torch.zeros(65, dtype=torch.int32, device="meta"),
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

    def propose(spec, mode: str) -> tuple[int, dict | None]:
        """One draft step's metadata build, as that version's DFlashSpeculator.propose makes it: the
        descriptor's token count and what the helper returned."""
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
            built = spec._build_draft_attn_metadata(
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
            built = spec._build_uniform_attn_metadata(
                batch_desc=desc,
                num_reqs=NUM_REQS,
                num_query_per_req=PER_REQ,
                seq_lens_cpu_upper_bound=upper,
                step=PER_REQ,
                causal=False,
            )
        return desc.num_tokens, built

    for guard_mode in ("off", "raise", "warn"):
        install.uninstall()
        os.environ["VLLM_SPECGUARD"] = guard_mode
        sg.register()
        for mode in ("PIECEWISE", "FULL", "NONE"):
            sg.reset_stats()
            seen.clear()
            result = {"guard": guard_mode, "mode": mode, "installed": installed, "skipped": skipped}
            try:
                result["descriptor_tokens"], built = propose(speculator(), mode)
                result["built_layers"] = sorted(built or ())
                result["raised"] = None
            except SpecGuardViolation as exc:
                result["raised"] = type(exc).__name__
                result["message"] = str(exc)
            result["stats"] = sg.stats()
            result["builder_saw"] = list(seen)
            print(json.dumps(result))

    # The V2 runner's entry itself, handed the seed's numbers outside any speculator helper, in an eager
    # deployment (no FULL graph could own the 4 extra tokens): G0 alone.
    group.metadata_builders[0].vllm_config.compilation_config.cudagraph_mode = CUDAGraphMode.NONE
    install.uninstall()
    os.environ["VLLM_SPECGUARD"] = "raise"
    sg.register()
    sg.reset_stats()
    seen.clear()
    result = {"guard": "raise", "mode": "build_attn_metadata", "raised": None}
    qsl = torch.arange(NUM_REQS + 1, dtype=torch.int32) * PER_REQ
    try:
        attn_utils.build_attn_metadata(
            attn_groups=[[group]],
            num_reqs=NUM_REQS,
            num_tokens=PEER_TOKENS,
            query_start_loc_gpu=qsl.clone(),
            query_start_loc_cpu=qsl,
            max_query_len=PER_REQ,
            seq_lens=torch.full((NUM_REQS,), 100, dtype=torch.int32),
            max_seq_len=100,
            block_tables=[torch.zeros(NUM_REQS, 8, dtype=torch.int32)],
            slot_mappings=torch.zeros(1, 256, dtype=torch.int64),
            kv_cache_config=kv_cache_config,
        )
    except SpecGuardViolation as exc:
        result["raised"] = type(exc).__name__
        result["message"] = str(exc)
    result["builder_saw"] = list(seen)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
