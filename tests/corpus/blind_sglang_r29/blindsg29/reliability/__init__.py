"""Serving-reliability team: speculative variants and planning glue."""
