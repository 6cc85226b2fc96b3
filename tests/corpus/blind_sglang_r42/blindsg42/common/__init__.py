"""Shared planning state for the fork's workers and runners."""
