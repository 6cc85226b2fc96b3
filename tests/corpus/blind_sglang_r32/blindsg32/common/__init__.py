"""Settings, environment flags and small value types shared by the MTP
drafting code and the forked MLA backends."""

from blindsg32.common.env_flags import MTPEnv
from blindsg32.common.settings import MTPDraftSettings
from blindsg32.common.shapes import DraftBudget, DraftShape

__all__ = ["MTPEnv", "MTPDraftSettings", "DraftBudget", "DraftShape"]
