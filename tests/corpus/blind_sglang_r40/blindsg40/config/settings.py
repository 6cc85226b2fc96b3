"""Frozen configuration objects built once from ``ServerArgs``.

The fork never reads ``server_args`` on a hot path; every component receives
one of these immutable snapshots through its constructor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from sglang.srt.runtime_context import get_parallel


def _arg(server_args: Any, name: str, default: Any) -> Any:
    value = getattr(server_args, name, None)
    return default if value is None else value


@dataclass(frozen=True)
class ParallelSettings:
    """Data-parallel attention / MLP-sync facts relevant to draft planning."""

    enable_dp_attention: bool
    dp_size: int
    tp_size: int
    disable_cuda_graph: bool = False

    @classmethod
    def from_server_args(cls, server_args: Any) -> "ParallelSettings":
        dp_size = int(_arg(server_args, "dp_size", 1))
        return cls(
            enable_dp_attention=bool(_arg(server_args, "enable_dp_attention", False))
            and dp_size > 1,
            dp_size=dp_size,
            tp_size=int(_arg(server_args, "tp_size", 1)),
            disable_cuda_graph=bool(_arg(server_args, "disable_cuda_graph", False)),
        )

    @property
    def pads_for_mlp_sync(self) -> bool:
        return self.enable_dp_attention


@dataclass(frozen=True)
class SpecSettings:
    algorithm: str
    num_steps: int
    topk: int
    num_draft_tokens: int

    @classmethod
    def from_server_args(cls, server_args: Any) -> "SpecSettings":
        return cls(
            algorithm=str(_arg(server_args, "speculative_algorithm", "EAGLE")),
            num_steps=int(_arg(server_args, "speculative_num_steps", 1)),
            topk=int(_arg(server_args, "speculative_eagle_topk", 1)),
            num_draft_tokens=int(_arg(server_args, "speculative_num_draft_tokens", 1)),
        )

    @property
    def multi_step(self) -> bool:
        return self.num_steps > 1


@dataclass(frozen=True)
class DcpSettings:
    """Decode context parallel layout of this rank."""

    size: int
    rank: int
    interleave: int = 1
    kernel_backend: str = "cute-dsl"
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_server_args(
        cls, server_args: Any, dcp_rank: Optional[int] = None
    ) -> "DcpSettings":
        size = int(_arg(server_args, "dcp_size", 1))
        if dcp_rank is None:
            dcp_rank = get_parallel().dcp_rank if size > 1 else 0
        decode_backend = _arg(server_args, "decode_attention_backend", None) or _arg(
            server_args, "attention_backend", "trtllm_mla"
        )
        kernel_backend = "cute-dsl" if decode_backend == "cutedsl_mla" else "trtllm-gen"
        return cls(size=size, rank=int(dcp_rank), kernel_backend=kernel_backend)

    @property
    def enabled(self) -> bool:
        return self.size > 1
