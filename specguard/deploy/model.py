"""The serving-config options the pre-flight reads, modelled with pydantic.

Keys are `vllm serve` option names. Only the options a hazard depends on are modelled; every other vLLM option is
accepted and ignored (extra="allow"), because a pre-flight that rejected valid vLLM configs would be useless.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


def _int_like(value: Any) -> Any:
    """Accept ints and decimal strings (argv gives strings); refuse bools and floats, which vLLM refuses too."""
    if isinstance(value, bool):
        # pydantic reports only ValueError/AssertionError raised in validators as validation errors.
        raise ValueError("an integer (not a boolean)")  # noqa: TRY004
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return value


def _bool_like(value: Any) -> Any:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
    return value


def json_mapping(value: Any) -> Any:
    """JSON-valued options (`speculative-config`, `compilation-config`) come as a mapping or a JSON string."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"a mapping or a JSON object string (the JSON is invalid: {exc.msg})") from None
    if isinstance(value, dict):
        # vLLM's nested config fields use underscores; accept dashes as the CLI does.
        return {str(k).replace("-", "_"): v for k, v in value.items()}
    return value


def _upper_name(value: Any) -> Any:
    if isinstance(value, str):
        stripped = value.strip()
        return None if stripped.lower() in ("", "auto") else stripped.upper()
    return value


PositiveInt = Annotated[int, BeforeValidator(_int_like), Field(strict=False, ge=1)]
Flag = Annotated[bool, BeforeValidator(_bool_like)]
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


class CompilationConfig(BaseModel):
    """`--compilation-config`: only the CUDA-graph mode matters to the hazards."""

    model_config = ConfigDict(extra="allow")

    cudagraph_mode: EnumName = None


class ServingConfig(BaseModel):
    """A `vllm serve` configuration. Field aliases are the CLI option names with dashes."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    data_parallel_size: PositiveInt = Field(1, alias="data-parallel-size")
    tensor_parallel_size: PositiveInt = Field(1, alias="tensor-parallel-size")
    decode_context_parallel_size: PositiveInt = Field(1, alias="decode-context-parallel-size")
    prefill_context_parallel_size: PositiveInt = Field(1, alias="prefill-context-parallel-size")
    cp_kv_cache_interleave_size: PositiveInt | None = Field(None, alias="cp-kv-cache-interleave-size")
    dcp_kv_cache_interleave_size: PositiveInt | None = Field(None, alias="dcp-kv-cache-interleave-size")
    block_size: PositiveInt | None = Field(None, alias="block-size")
    attention_backend: EnumName = Field(None, alias="attention-backend")
    speculative_config: Annotated[SpeculativeConfig | None, BeforeValidator(json_mapping)] = Field(
        None, alias="speculative-config"
    )
    compilation_config: Annotated[CompilationConfig | None, BeforeValidator(json_mapping)] = Field(
        None, alias="compilation-config"
    )
    enforce_eager: Flag = Field(False, alias="enforce-eager")

    @property
    def method(self) -> str | None:
        return self.speculative_config.method if self.speculative_config else None

    @property
    def cudagraph_mode(self) -> str | None:
        return self.compilation_config.cudagraph_mode if self.compilation_config else None


def modelled_keys() -> list[str]:
    """Top-level option names (dashed) the model knows."""
    return [f.alias or name for name, f in ServingConfig.model_fields.items()]


def nested_keys(option: str) -> list[str]:
    """Field names of a JSON-valued option's model (underscored, as vLLM spells them)."""
    model = {"speculative-config": SpeculativeConfig, "compilation-config": CompilationConfig}.get(option)
    return list(model.model_fields) if model else []


# Short spellings `vllm serve` accepts for the modelled options (from its argument parser).
SHORT_OPTIONS: dict[str, str] = {
    "tp": "tensor-parallel-size",
    "dp": "data-parallel-size",
    "dcp": "decode-context-parallel-size",
    "pcp": "prefill-context-parallel-size",
    "sc": "speculative-config",
    "cc": "compilation-config",
}

# Options that are switches on the command line (present = true, `--no-x` = false).
FLAG_OPTIONS = frozenset({"enforce-eager"})
