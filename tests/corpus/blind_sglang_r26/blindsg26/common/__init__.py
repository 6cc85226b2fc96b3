"""Shared settings and planning / DCP helpers for the fork overlay."""
