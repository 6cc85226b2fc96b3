"""The serving-config values the hazards read, modelled with pydantic.

Input is what the served vLLM's parser made of the command line or YAML (`cmdline.py`), keyed by argparse dest.
Only the options a hazard depends on are modelled; every other option is kept as parsed and ignored
(extra="allow"). The types here check what the hazards rely on (sizes are integers >= 1, ...).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from specguard.deploy.arguments import OptionDef, ValueKind


def _int_like(value: Any) -> Any:
    """Accept ints and decimal strings; refuse bools and floats, which vLLM refuses too."""
    if isinstance(value, bool):
        # pydantic reports only ValueError/AssertionError raised in validators as validation errors.
        raise ValueError("an integer (not a boolean)")  # noqa: TRY004
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return value


def _upper_name(value: Any) -> Any:
    """An enum member name as vLLM's validators take it: case-insensitive, `auto` means unset."""
    if isinstance(value, str):
        stripped = value.strip()
        return None if stripped.lower() in ("", "auto") else stripped.upper()
    return value


PositiveInt = Annotated[int, BeforeValidator(_int_like), Field(strict=False, ge=1)]
EnumName = Annotated[str | None, BeforeValidator(_upper_name)]


class SpeculativeConfig(BaseModel):
    """`--speculative-config`: the fields the hazards read. Other fields are kept but not checked."""

    model_config = ConfigDict(extra="allow")

    method: str | None = None
    model: str | None = None
    num_speculative_tokens: PositiveInt | None = None
    draft_tensor_parallel_size: PositiveInt | None = None
    # vLLM rejects this key inside speculative-config (it wants draft_tensor_parallel_size); modelled so the
    # pre-flight can say so instead of the server.
    tensor_parallel_size: Annotated[int, BeforeValidator(_int_like)] | None = None
    num_speculative_tokens_per_batch_size: list[Any] | None = None
    # The draft's own attention backend (DSpark drafts use it instead of the target's).
    attention_backend: EnumName = None


class CompilationConfig(BaseModel):
    """`--compilation-config`: only the CUDA-graph mode matters to the hazards."""

    model_config = ConfigDict(extra="allow")

    cudagraph_mode: EnumName = None


class KVTransferConfig(BaseModel):
    """`--kv-transfer-config`: the connector decides where vLLM resolves the DCP interleave (NIXL P/D)."""

    model_config = ConfigDict(extra="allow")

    kv_connector: str | None = None
    kv_role: str | None = None


class ServingConfig(BaseModel):
    """A `vllm serve` configuration, by argparse dest (`data_parallel_size`, ...)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    data_parallel_size: PositiveInt = 1
    tensor_parallel_size: PositiveInt = 1
    decode_context_parallel_size: PositiveInt = 1
    prefill_context_parallel_size: PositiveInt = 1
    cp_kv_cache_interleave_size: PositiveInt | None = None
    dcp_kv_cache_interleave_size: PositiveInt | None = None
    block_size: PositiveInt | None = None
    # The effective backend: `--attention-backend` or `--attention-config.backend` (vLLM refuses both).
    attention_backend: EnumName = None
    speculative_config: SpeculativeConfig | None = None
    compilation_config: CompilationConfig | None = None
    kv_transfer_config: KVTransferConfig | None = None
    enforce_eager: bool = False

    @property
    def method(self) -> str | None:
        return self.speculative_config.method if self.speculative_config else None

    @property
    def cudagraph_mode(self) -> str | None:
        return self.compilation_config.cudagraph_mode if self.compilation_config else None

    @property
    def draft_backend(self) -> str | None:
        return self.speculative_config.attention_backend if self.speculative_config else None


# How the modelled options look on the command line, for reading without a served source (nothing is judged
# then, but a misspelt or mistyped modelled option is still reported). With a source, its own definitions are
# used for every option.
FALLBACK_OPTIONS: list[OptionDef] = [
    OptionDef((), "model_tag", "store", nargs="?"),
    OptionDef(("--model",), "model", "store"),
    OptionDef(("--config",), "config", "store"),
    OptionDef(("--data-parallel-size", "-dp"), "data_parallel_size", "store", value=ValueKind("int")),
    OptionDef(("--tensor-parallel-size", "-tp"), "tensor_parallel_size", "store", value=ValueKind("int")),
    OptionDef(
        ("--decode-context-parallel-size", "-dcp"), "decode_context_parallel_size", "store", value=ValueKind("int")
    ),
    OptionDef(
        ("--prefill-context-parallel-size", "-pcp"), "prefill_context_parallel_size", "store", value=ValueKind("int")
    ),
    OptionDef(("--cp-kv-cache-interleave-size",), "cp_kv_cache_interleave_size", "store", value=ValueKind("int")),
    OptionDef(("--dcp-kv-cache-interleave-size",), "dcp_kv_cache_interleave_size", "store", value=ValueKind("int")),
    OptionDef(("--block-size",), "block_size", "store", value=ValueKind("int", optional=True)),
    OptionDef(("--attention-backend",), "attention_backend", "store", value=ValueKind("str", optional=True)),
    OptionDef(("--speculative-config", "-sc"), "speculative_config", "store", value=ValueKind("json", True)),
    OptionDef(("--compilation-config", "-cc"), "compilation_config", "store", value=ValueKind("json")),
    OptionDef(("--attention-config", "-ac"), "attention_config", "store", value=ValueKind("json")),
    OptionDef(("--kv-transfer-config",), "kv_transfer_config", "store", value=ValueKind("json", True)),
    OptionDef(("--enforce-eager",), "enforce_eager", "boolean"),
]
