"""Speculative worker subclasses used by the fork's scheduler."""
