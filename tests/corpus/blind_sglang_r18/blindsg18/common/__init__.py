"""Shared helpers for the fork's speculative workers and attention backends."""
