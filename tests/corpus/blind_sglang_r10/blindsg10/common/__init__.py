"""Helpers shared by the fork's speculative workers, runners and backends."""
