"""Shared helpers for the fork: config flags, DCP length math, plan helpers."""
