"""MLA attention backends and kernel launchers used under decode context parallelism."""
