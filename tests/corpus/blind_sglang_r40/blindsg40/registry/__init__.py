from blindsg40.registry.core import (
    DCP_BACKENDS,
    DRAFT_STRATEGIES,
    MODE_HANDLERS,
    Registry,
    register_dcp_backend,
    register_draft_strategy,
    register_mode_handler,
)

__all__ = [
    "DCP_BACKENDS",
    "DRAFT_STRATEGIES",
    "MODE_HANDLERS",
    "Registry",
    "register_dcp_backend",
    "register_draft_strategy",
    "register_mode_handler",
]
