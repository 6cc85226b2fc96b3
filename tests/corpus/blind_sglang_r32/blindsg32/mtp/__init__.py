"""Multi-token-prediction drafting for DeepSeek-style models (spec v2)."""

from blindsg32.mtp.standalone_mtp_worker import StandaloneMTPDraftWorker

__all__ = ["StandaloneMTPDraftWorker"]
