"""MLA decode kernels under decode context parallelism (DCP)."""
