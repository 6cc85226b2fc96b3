"""Runs vLLM 0.28.0's own code on files `specguard check --fix` wrote, on CPU, and prints what it decided.

Run as a script by test_fix_proofs.py, with vLLM 0.28.0's code first on PYTHONPATH. `fix_probe.py vllm` takes
`module=path` pairs: each named vLLM module is loaded from that (fixed) file instead of the installed one, before
anything imports it, so every importer in vLLM sees the fixed code; it runs every scenario below and prints one
JSON line. `fix_probe.py merges PATH...` runs the `merges` scenario on each module.

- `sg201`: KV-cache grouping as vLLM 0.28.0 decides it (`is_kv_cache_spec_uniform` probing `merge`, and the
  grouping of a uniform-page-size model, which merges the layers whose specs merge) for a causal target MLA
  layer beside a non-causal draft layer, and for agreeing layers.
- `dflash`: one `DFlashSpeculator.propose` of vLLM 0.28.0 (the real method; the model, the Triton input
  kernel and the graph replay are CPU stand-ins) for 12 requests x 4 draft tokens on DP rank 0 of 2 while the
  peer has 52 tokens, under FULL, PIECEWISE and eager CUDA graphs: what the draft group's builder was handed.
- `decode`: `AutoRegressiveSpeculator._multi_step_decode` and `_fused_multi_step_decode` (one token per request,
  12 requests, a descriptor padded to 16), under FULL and PIECEWISE graphs.
- `merges`: the same grouping decisions for every spec class of the module at PATH that merges the flag
  (the rule's examples and other merge shapes, fixed), with vLLM 0.28.0's `kv_cache_utils`.
- `plugin sg102` / `plugin sg104`: a speculator plugin outside vLLM's tree, before and after its SG102 or SG104
  fix, calling vLLM's shared helper (0.28.0's for SG102, 0.33.0's, which recomputes DCP lengths, for SG104).
- `mtp`: `MultiModuleMTPSpeculator.propose`'s draft prefill build for a mixed batch (query lengths 1..4, 30
  tokens padded to 32) under FULL and PIECEWISE graphs.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import sys
import types
from typing import Any

NUM_REQS, PER_REQ, PEER_TOKENS, DP_SIZE = 12, 4, 52, 2


class _FixedFiles(importlib.abc.MetaPathFinder):
    """Serves the named modules from the given files."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.files:
            return None
        return importlib.util.spec_from_file_location(name, self.files[name])


def _recording_builder(seen: list[dict[str, int]]) -> Any:
    """An attention backend's builder that records what each build is handed (the draft group's backend)."""
    from vllm.v1.attention.backend import AttentionMetadataBuilder

    class ProbeBuilder(AttentionMetadataBuilder):
        def __init__(self) -> None:
            self.layer_names = ["draft.layers.0.attn"]

        def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any:
            md = common_attn_metadata
            seen.append(
                {"num_actual_tokens": md.num_actual_tokens, "query_tokens": int(md.query_start_loc_cpu[md.num_reqs])}
            )
            return None

    return ProbeBuilder()


def _attention(seen: list[dict[str, int]]) -> tuple[Any, Any]:
    """One draft KV-cache group with one attention group whose builder records its builds."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.worker.utils import AttentionGroup

    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)
    group = AttentionGroup(backend=None, layer_names=["draft.layers.0.attn"], kv_cache_spec=spec, kv_cache_group_id=0)
    group.metadata_builders = [_recording_builder(seen)]
    config = types.SimpleNamespace(
        kv_cache_groups=[types.SimpleNamespace(kv_cache_spec=spec, layer_names=["draft.layers.0.attn"])]
    )
    return [[group]], config


def _speculator_state(cls: type, seen: list[dict[str, int]], **extra: Any) -> Any:
    """An instance of a vLLM speculator without its __init__ (which loads a model on a GPU), holding what the
    shared draft-metadata helper and the step under test read."""
    import numpy as np
    import torch

    attn_groups, kv_cache_config = _attention(seen)
    abstract = getattr(cls, "__abstractmethods__", frozenset())
    concrete = type(f"Probe{cls.__name__}", (cls,), dict.fromkeys(abstract, lambda *args, **kwargs: None))
    spec = object.__new__(concrete)  # the methods under test are the class's own, inherited unchanged
    spec.__dict__.update(
        dp_size=DP_SIZE,
        dp_rank=0,
        max_model_len=4096,
        draft_max_seq_len=4096,
        attn_groups=attn_groups,
        kv_cache_config=kv_cache_config,
        arange=torch.arange(257, dtype=torch.int32),
        arange_np=np.arange(257, dtype=np.int32),
        eplb_state=None,
        block_tables=types.SimpleNamespace(
            input_block_tables=[torch.zeros(256, 8, dtype=torch.int32)],
            slot_mappings=torch.zeros(1, 1024, dtype=torch.int64),
            kernel_block_sizes=[16],
            compute_slot_mappings=lambda *args: torch.zeros(1, 1024, dtype=torch.int64),
        ),
        input_buffers=types.SimpleNamespace(
            query_start_loc=torch.zeros(257, dtype=torch.int32),
            seq_lens=torch.full((256,), 100, dtype=torch.int32),
            positions=torch.zeros(1024, dtype=torch.int64),
        ),
        **extra,
    )
    return spec


class _Graphs:
    """A CUDA-graph manager with graphs of one mode, captured for every size; replays are recorded."""

    def __init__(self, mode: str) -> None:
        from vllm.config.compilation import CUDAGraphMode

        self.mode = CUDAGraphMode[mode]
        self.replayed: list[int] = []

    def dispatch(self, num_reqs: int, num_tokens: int, uniform_token_count: Any, *args: Any, **kwargs: Any) -> Any:
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

        full = self.mode.name == "FULL"
        reqs = -(-num_tokens // uniform_token_count) if full and uniform_token_count else None
        return BatchExecutionDescriptor(
            cg_mode=self.mode, num_tokens=num_tokens, num_reqs=reqs, uniform_token_count=uniform_token_count
        )

    def run_fullgraph(self, desc: Any) -> None:
        self.replayed.append(desc.num_tokens)


def _dp_peer() -> None:
    """The other DP rank of vLLM's DP sync: it has PEER_TOKENS tokens, so this rank's descriptor is padded."""
    from vllm.v1.worker.gpu import dp_utils

    def peer_all_reduce(tensor: Any, group: Any = None) -> None:
        tensor[0][1] = PEER_TOKENS
        tensor[1][1] = tensor[1][0]
        tensor[2][1] = tensor[2][0]
        tensor[3][1] = -1

    dp_utils.get_dp_group = lambda: types.SimpleNamespace(cpu_group=None)
    dp_utils.dist = types.SimpleNamespace(all_reduce=peer_all_reduce)


# ---- SG201 --------------------------------------------------------------------------------------------------


def sg201() -> dict[str, Any]:
    import torch
    from vllm.v1.core import kv_cache_utils as utils
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    def mla(non_causal: bool) -> Any:
        return MLAAttentionSpec(
            block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16, non_causal_multi_token_decode=non_causal
        )

    def groups(specs: dict[str, Any]) -> list[list[Any]]:
        return [
            [g.layer_names, g.kv_cache_spec.non_causal_multi_token_decode]
            for g in utils._get_kv_cache_groups_uniform_page_size(specs)
        ]

    mixed = {"target.0": mla(False), "target.1": mla(False), "draft.0": mla(True)}
    agreeing = {"draft.0": mla(True), "draft.1": mla(True)}
    try:
        MLAAttentionSpec.merge([mla(False), mla(True)])
        merge_error = None
    except AssertionError as exc:
        merge_error = f"AssertionError: {exc}"
    return {
        "uniform_mixed": utils.is_kv_cache_spec_uniform(mixed),
        "uniform_agreeing": utils.is_kv_cache_spec_uniform(agreeing),
        "merged_agreeing": [MLAAttentionSpec.merge([mla(v), mla(v)]).non_causal_multi_token_decode for v in (0, 1)],
        "merge_error": merge_error,
        "groups_mixed": groups(mixed),
        "groups_agreeing": groups(agreeing),
    }


def merges(path: str) -> dict[str, Any]:
    """The same decisions for every spec class of the module at `path` that merges the flag: its instances
    differ only in the flag (every other field has a default, or is a 16-token block size)."""
    import dataclasses

    from vllm.v1.core import kv_cache_utils as utils

    spec = importlib.util.spec_from_file_location("specguard_merge_shapes", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out: dict[str, Any] = {}
    for name, cls in vars(module).items():
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and "merge" in vars(cls)):
            continue
        needed = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        if needed - {"block_size"}:
            continue

        def make(flag: bool, cls: type = cls, needed: set[str] = needed) -> Any:
            return cls(non_causal_multi_token_decode=flag, **dict.fromkeys(needed, 16))

        try:
            cls.merge([make(False), make(True)])
            raised = None
        except Exception as exc:  # noqa: BLE001 - which exception a merge raises is what is measured
            raised = type(exc).__name__
        mixed = {"target.0": make(False), "target.1": make(False), "draft.0": make(True)}
        out[name] = {
            "raised": raised,
            "uniform_mixed": utils.is_kv_cache_spec_uniform(mixed),
            "uniform_agreeing": utils.is_kv_cache_spec_uniform({"a": make(True), "b": make(True)}),
            "merged_agreeing": [cls.merge([make(v), make(v)]).non_causal_multi_token_decode for v in (False, True)],
            "groups_mixed": [
                [g.layer_names, g.kv_cache_spec.non_causal_multi_token_decode]
                for g in utils._get_kv_cache_groups_uniform_page_size(mixed)
            ],
        }
    return out


# ---- SG103 --------------------------------------------------------------------------------------------------


def dflash() -> dict[str, Any]:
    import torch
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator as module

    _dp_peer()
    module.prepare_dflash_inputs = lambda *args, **kwargs: None  # a Triton kernel: fills the input buffers
    out: dict[str, Any] = {}
    for mode in ("FULL", "PIECEWISE", "NONE"):
        seen: list[dict[str, int]] = []
        graphs = _Graphs(mode)
        drafted: list[int] = []
        spec = _speculator_state(
            module.DFlashSpeculator,
            seen,
            num_query_per_req=PER_REQ,
            num_speculative_steps=PER_REQ - 1,
            draft_attn_layer_names={"draft.layers.0.attn"},
            query_cudagraph_manager=graphs,
            hidden_states=torch.zeros(256, 8),
            context_positions=torch.zeros(256, dtype=torch.int64),
            draft_kv_cache_group_id=0,
            draft_kv_cache_group_ids=[0],
            _context_slot_mappings=[torch.zeros(256, dtype=torch.int64)],
            _layer_group_idx=None,
            _group_causal=False,
            draft_tokens=torch.zeros(256, PER_REQ - 1, dtype=torch.int64),
            model=types.SimpleNamespace(precompute_and_store_context_kv=lambda *args: None),
            # what propose hands the (stand-in) input kernel
            **dict.fromkeys(
                ("sample_indices", "sample_pos", "sample_idx_mapping", "temperature", "seeds", "max_num_reqs")
                + ("parallel_drafting_token_id", "max_num_tokens", "sample_from_anchor"),
            ),
        )
        spec._generate_draft = lambda num_reqs, num_tokens, *args, drafted=drafted, **kwargs: drafted.append(num_tokens)
        batch = types.SimpleNamespace(
            num_reqs=NUM_REQS,
            num_tokens=NUM_REQS * 2,
            seq_lens_cpu_upper_bound=torch.full((256,), 100, dtype=torch.int32),
        )
        none = torch.zeros(1)
        spec.propose(batch, {}, {}, torch.zeros(NUM_REQS * 2, 8), None, none, none, none, none, none, none)
        out[mode] = {"builds": seen, "replayed": graphs.replayed, "drafted": drafted}
    return out


def decode() -> dict[str, Any]:
    import torch
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
    from vllm.v1.worker.gpu.spec_decode.autoregressive import speculator as module

    out: dict[str, Any] = {}
    for step in ("_multi_step_decode", "_fused_multi_step_decode"):
        for mode in ("FULL", "PIECEWISE"):
            seen: list[dict[str, int]] = []
            graphs = _Graphs(mode)
            spec = _speculator_state(
                module.AutoRegressiveSpeculator,
                seen,
                num_speculative_steps=2,
                advance_draft_positions=True,
                decode_cudagraph_manager=graphs,
                idx_mapping=torch.arange(256, dtype=torch.int32),
                current_draft_step=torch.zeros(1, dtype=torch.int64),
            )
            spec._generate_draft = lambda *args, **kwargs: None
            spec._generate_fused_drafts = lambda *args, **kwargs: None
            desc = BatchExecutionDescriptor(
                cg_mode=graphs.mode, num_tokens=16, num_reqs=16 if mode == "FULL" else None, uniform_token_count=1
            )
            upper = torch.full((256,), 100, dtype=torch.int32)
            getattr(spec, step)(NUM_REQS, False, desc, None, upper)
            out[f"{step}:{mode}"] = {"builds": seen, "replayed": graphs.replayed}
    return out


def mtp() -> dict[str, Any]:
    import numpy as np
    import torch
    from vllm.v1.worker.gpu.spec_decode.multi_module_mtp import speculator as module

    q_lens = [1 + i % 4 for i in range(NUM_REQS)]
    qsl = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    real = int(qsl[-1])
    out: dict[str, Any] = {"real": real}
    for mode in ("FULL", "PIECEWISE"):
        seen: list[dict[str, int]] = []
        graphs = _Graphs(mode)
        spec = _speculator_state(
            module.MultiModuleMTPSpeculator,
            seen,
            cudagraph_manager=graphs,
            idx_mapping=torch.arange(256, dtype=torch.int32),
            last_token_indices=torch.zeros(256, dtype=torch.int64),
            draft_tokens=torch.zeros(256, 2, dtype=torch.int64),
        )
        spec._copy_request_inputs = lambda *args: None
        spec._prepare_inputs = lambda *args: None
        spec._generate_drafts = lambda *args, **kwargs: None
        module.pad_trailing_draft_slots = lambda *args: None  # a Triton kernel
        module.dispatch_cg_and_sync_dp = lambda manager, num_reqs, num_tokens, uniform, **kw: (
            manager.dispatch(num_reqs, 32, None),
            None,
        )
        batch = types.SimpleNamespace(
            num_reqs=NUM_REQS,
            num_tokens=real,
            num_tokens_after_padding=32,
            num_scheduled_tokens=np.array(q_lens, dtype=np.int32),
            query_start_loc=torch.from_numpy(qsl),
            query_start_loc_np=qsl,
            seq_lens_cpu_upper_bound=torch.full((256,), 100, dtype=torch.int32),
            idx_mapping=torch.arange(NUM_REQS, dtype=torch.int32),
            has_prefill=True,
        )
        none = torch.zeros(1)
        spec.propose(batch, {}, {}, torch.zeros(real, 8), None, none, none, none, none, none, none)
        out[mode] = {"builds": seen, "replayed": graphs.replayed}
    return out


# ---- SG102 and SG104: a speculator plugin outside vLLM's tree, before and after its fix ----------------------


def _load(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sg102(path: str, name: str) -> list[Any]:
    """vLLM 0.28.0's shared draft-metadata helper reached through the plugin's speculator, called the ways a
    caller may call the override (by position, by keyword, with the optional arguments, wrongly)."""
    import numpy as np
    import torch

    seen: list[dict[str, int]] = []
    spec = _speculator_state(_load(path, name).PluginSpeculator, seen)
    upper = torch.full((256,), 100, dtype=torch.int32)
    qsl = np.array([0, 1, 3, 6, 10], dtype=np.int32)
    calls = [
        lambda: spec._build_draft_attn_metadata(4, 4, 10, upper, 1, query_start_loc_np=qsl),
        lambda: spec._build_draft_attn_metadata(
            num_reqs=NUM_REQS, num_reqs_padded=16, num_tokens_padded=48, seq_lens_cpu_upper_bound=upper, step=2
        ),
        lambda: spec._build_draft_attn_metadata(NUM_REQS, 16, 48, upper, 2, num_query_per_req=PER_REQ),
        lambda: spec._build_draft_attn_metadata(NUM_REQS, 16, 48, upper),  # no step: a TypeError either way
    ]
    out: list[Any] = []
    for call in calls:
        seen.clear()
        try:
            call()
            out.append(list(seen))
        except TypeError:
            out.append("TypeError")
    return out


def sg104(path: str, name: str) -> list[Any]:
    """vLLM 0.33.0's shared helper reached from the plugin's draft step under DCP (2 ranks, this one rank 1):
    the DCP-local lengths the draft group's builder is handed. The preparation is a Triton kernel; a CPU
    stand-in with the kernel's signature fills the buffer from what it is given, the same for both runs."""
    import numpy as np
    import torch
    from vllm.v1.worker.gpu import cp_utils
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
    from vllm.v1.worker.gpu.spec_decode import speculator as base

    prepared: list[list[Any]] = []

    def prepare(buffer, seq_lens, num_reqs, size, rank, interleave, *, num_reqs_padded=None):  # type: ignore[no-untyped-def]
        prepared.append([num_reqs, size, rank, interleave])
        buffer[:num_reqs] = (seq_lens[:num_reqs] + size - 1 - rank) // size
        return buffer[:num_reqs_padded]

    module = _load(path, name)
    for owner in (cp_utils, base, module):
        if hasattr(owner, "prepare_dcp_local_seq_lens"):
            owner.prepare_dcp_local_seq_lens = prepare
    seen: list[Any] = []
    spec = _speculator_state(module.PluginSpeculator, [])
    spec.attn_groups[0][0].metadata_builders = [_dcp_recorder(seen)]
    spec.__dict__.update(
        dcp_size=2,
        draft_is_prefilling=torch.zeros(256, dtype=torch.bool),
        vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(max_model_len=4096)),
    )
    spec.block_tables.cp_rank, spec.block_tables.cp_interleave, spec.block_tables.cp_size = 1, 1, 2
    spec.input_buffers.dcp_local_seq_lens = torch.zeros(256, dtype=torch.int32)
    spec.input_buffers.seq_lens[:NUM_REQS] = torch.arange(90, 90 + NUM_REQS, dtype=torch.int32)
    desc = BatchExecutionDescriptor(cg_mode=_Graphs("NONE").mode, num_tokens=NUM_REQS, num_reqs=None)
    qsl = np.arange(NUM_REQS + 1, dtype=np.int32)
    spec.draft_step(NUM_REQS, desc, qsl, torch.full((256,), 100, dtype=torch.int32))
    return [seen, prepared]


def _dcp_recorder(seen: list[Any]) -> Any:
    from vllm.v1.attention.backend import AttentionMetadataBuilder

    class DcpProbeBuilder(AttentionMetadataBuilder):
        def __init__(self) -> None:
            self.layer_names = ["draft.layers.0.attn"]

        def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any:
            lens = common_attn_metadata.dcp_local_seq_lens
            seen.append(None if lens is None else lens[: common_attn_metadata.num_reqs].tolist())

    return DcpProbeBuilder()


PLUGINS = {"sg102": sg102, "sg104": sg104}
SCENARIOS = {"sg201": sg201, "dflash": dflash, "decode": decode, "mtp": mtp}


def main() -> None:
    """`fix_probe.py vllm [module=path ...]`: every vLLM scenario, with those modules from those files;
    `fix_probe.py merges path ...`: the merges of each module; `fix_probe.py plugin sg102|sg104 path ...`: that
    plugin scenario on each plugin module. One JSON line each."""
    if sys.argv[1] == "merges":
        print(json.dumps({path: merges(path) for path in sys.argv[2:]}))
        return
    if sys.argv[1] == "plugin":
        run = PLUGINS[sys.argv[2]]
        print(json.dumps({f"{i}": run(path, f"specguard_plugin_{i}") for i, path in enumerate(sys.argv[3:])}))
        return
    files = dict(arg.split("=", 1) for arg in sys.argv[2:])
    sys.meta_path.insert(0, _FixedFiles(files))
    results = {name: run() for name, run in SCENARIOS.items()}
    loaded = {name: getattr(sys.modules.get(name), "__file__", None) for name in files}
    print(json.dumps({"loaded": loaded, **results}))


if __name__ == "__main__":
    main()
