"""MLA attention backends with decode context parallelism (DCP) tweaks."""
