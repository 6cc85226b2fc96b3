"""Helpers shared by the fork's attention backends, runners and spec workers."""
