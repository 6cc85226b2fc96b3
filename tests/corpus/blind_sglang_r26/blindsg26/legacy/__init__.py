"""Overlay for the 0.5.6 branch of the fork (``skip_attn_backend_init`` era)."""
