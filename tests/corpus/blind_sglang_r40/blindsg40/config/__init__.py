from blindsg40.config.settings import (
    DcpSettings,
    ParallelSettings,
    SpecSettings,
)

__all__ = ["DcpSettings", "ParallelSettings", "SpecSettings"]
