"""Accelerator team: MLA attention backends under decode context parallelism."""
