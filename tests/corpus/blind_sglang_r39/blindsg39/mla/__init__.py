"""MLA attention backends of the fork (TRT-LLM MLA, CuteDSL MLA, FlashInfer
MLA, FlashMLA) with decode context parallelism helpers in :mod:`.utils`."""

from blindsg39.mla.utils import DcpLens, DecodeLaunchArgs, dcp_world_and_rank

__all__ = ["DcpLens", "DecodeLaunchArgs", "dcp_world_and_rank"]
