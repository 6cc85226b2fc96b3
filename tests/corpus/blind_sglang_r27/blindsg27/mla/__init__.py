"""Kernel team: MLA attention backends with decode context parallelism (DCP)."""
