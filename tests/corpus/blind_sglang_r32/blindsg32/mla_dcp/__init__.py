"""Kernel-team fork of the FlashInfer / TRTLLM / CuteDSL MLA backends with
decode context parallelism (DCP) support."""

from blindsg32.mla_dcp.dcp_math import DcpShard, KvLens

__all__ = ["DcpShard", "KvLens"]
