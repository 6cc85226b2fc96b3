"""Shared helpers: server/env switches, DCP length helpers, planning guards."""
