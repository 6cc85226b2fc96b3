"""Kernels team: MLA decode under decode context parallelism (DCP)."""
