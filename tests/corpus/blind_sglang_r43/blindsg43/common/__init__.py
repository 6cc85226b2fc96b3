"""Shared switches and small helpers for the fork's speculative runtime."""
