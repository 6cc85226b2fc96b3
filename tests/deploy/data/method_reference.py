"""The reference of tests/deploy/test_method_differential.py: which speculative method a vLLM release arrives at,
by running its own `SpeculativeConfig` on a tiny local target and draft model (config.json only: nothing is
loaded). Run with the release's code first on the path. Test code: it imports vLLM, which specguard never does.

    python method_reference.py MODELS_DIR < cases.json    -> {"version": ..., "file": ..., "methods": {id: method}}

A case is {"id", "draft": [relative dir, architecture] or null, "spec": the speculative config without `model`}.
What vLLM refuses is "error: <class>".
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
ROOT = Path(sys.argv[1])


def _model(relpath: str, architecture: str) -> str:
    folder = ROOT / relpath
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": [architecture],
        "model_type": "qwen3",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "head_dim": 16,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def main() -> None:
    import vllm
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    cases = json.load(sys.stdin)
    target = ModelConfig(model=_model("Qwen/Qwen3-8B", "Qwen3ForCausalLM"), skip_tokenizer_init=True)
    methods = {}
    for case in cases:
        spec = dict(case["spec"])
        if case["draft"]:
            spec["model"] = _model(*case["draft"])
        try:
            built = SpeculativeConfig(**spec, target_model_config=target, target_parallel_config=ParallelConfig())
            methods[case["id"]] = built.method
        except Exception as exc:  # noqa: BLE001 - what vLLM refuses is an answer too
            methods[case["id"]] = f"error: {type(exc).__name__}"
    print(json.dumps({"version": vllm.__version__, "file": vllm.__file__, "methods": methods}))


main()
