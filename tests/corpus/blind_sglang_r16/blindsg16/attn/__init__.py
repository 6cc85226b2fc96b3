"""MLA attention backends and kernel launchers for decode context parallel (DCP)."""
