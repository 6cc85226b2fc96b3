"""vLLM's own reading of `vllm serve` command lines, for the differential test (run with a vLLM environment's python).

Reads a JSON list of cases (`{"id", "argv"}`) on stdin and prints one JSON object: the vLLM version and source
dir, and per case either the error vLLM's parser raised (`stage: "parse"`), the error EngineArgs raises before
building configs (`stage: "engine"`: `--spec-method` and a speculative-config key both given, both attention
backend options given), or the values specguard models, as vLLM holds them.

The parser is vLLM's real one, built as `vllm serve` builds it: a FlexibleArgumentParser whose `serve`
subparser is filled by `make_arg_parser` (FrontendArgs + AsyncEngineArgs.add_cli_args). This file is test
code: it imports vLLM, which specguard itself never does.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # this machine has no GPU; the parser does not need one

INTS = (
    "tensor_parallel_size",
    "data_parallel_size",
    "decode_context_parallel_size",
    "prefill_context_parallel_size",
    "cp_kv_cache_interleave_size",
    "dcp_kv_cache_interleave_size",
    "block_size",
)


def _parser() -> Any:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    for name in (
        "vllm.entrypoints.common.cli_args",
        "vllm.entrypoints.launchers.cli_args",
        "vllm.entrypoints.openai.cli_args",
    ):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "make_arg_parser"):
            top = FlexibleArgumentParser(prog="vllm")
            serve = top.add_subparsers(dest="subparser").add_parser("serve")
            module.make_arg_parser(serve)
            return top
    raise SystemExit("no make_arg_parser found in this vLLM")


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return {"__object__": type(value).__name__}
    return value


def _speculative(ns: Any) -> Any:
    """What EngineArgs hands SpeculativeConfig: its own create_speculative_config, with the class stubbed."""
    import vllm.engine.arg_utils as arg_utils

    engine = arg_utils.EngineArgs.__new__(arg_utils.EngineArgs)
    for name in ("speculative_config", "spec_method", "spec_model", "spec_tokens"):
        setattr(engine, name, getattr(ns, name, None))
    captured: dict[str, Any] = {}
    original = arg_utils.SpeculativeConfig
    arg_utils.SpeculativeConfig = lambda **kwargs: captured.update(kwargs) or captured  # type: ignore[assignment]
    try:
        result = engine.create_speculative_config(None, None)
    finally:
        arg_utils.SpeculativeConfig = original
    if result is None:
        return None
    return {k: v for k, v in captured.items() if k not in ("target_model_config", "target_parallel_config")}


def _backend(ns: Any) -> Any:
    """The attention backend vLLM uses: `--attention-backend` (through AttentionConfig's own validator) or
    `--attention-config.backend`; both given is EngineArgs' error."""
    from vllm.config import AttentionConfig

    config = ns.attention_config
    if ns.attention_backend is not None:
        if config.backend is not None:
            raise ValueError("attention_backend and attention_config.backend are mutually exclusive")
        try:
            value = AttentionConfig.validate_backend_before(ns.attention_backend)
        except (KeyError, ValueError):  # vLLM's enum lookup raises one or the other, by release
            return {"invalid": ns.attention_backend}
    else:
        value = config.backend
    return None if value is None else value.name


def _case(parser: Any, argv: list[str]) -> dict[str, Any]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(["serve", *argv])
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        return {"stage": "parse", "error": lines[-1] if lines else "exit"}
    except Exception as exc:  # noqa: BLE001 - a crash of vLLM's parser is an error the differential compares
        return {"stage": "parse", "error": f"{type(exc).__name__}: {exc}"}
    try:
        spec = _speculative(ns)
        backend = _backend(ns)
    except Exception as exc:  # noqa: BLE001 - EngineArgs' own refusals, before any config is built
        return {"stage": "engine", "error": f"{type(exc).__name__}: {exc}"}
    mode = getattr(ns.compilation_config, "cudagraph_mode", None)
    kv = ns.kv_transfer_config
    values = {name: getattr(ns, name, None) for name in INTS}
    values.update(
        model=ns.model_tag if getattr(ns, "model_tag", None) is not None else getattr(ns, "model", None),
        enforce_eager=bool(ns.enforce_eager),
        attention_backend=backend,
        speculative_config=spec,
        cudagraph_mode=None if mode is None else mode.name,
        kv_connector=None if kv is None else kv.kv_connector,
    )
    namespace = {k: _jsonable(v) for k, v in vars(ns).items()}
    return {"values": _jsonable(values), "namespace": namespace}


def main() -> None:
    cases = json.load(sys.stdin)
    import vllm

    with contextlib.redirect_stdout(sys.stderr):  # vLLM logs at import and parser construction
        parser = _parser()
        results = {case["id"]: _case(parser, case["argv"]) for case in cases}
    source = os.path.dirname(vllm.__file__)
    print(json.dumps({"version": vllm.__version__, "source": source, "results": results}))


if __name__ == "__main__":
    main()
