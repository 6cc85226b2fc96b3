"""Hardened serving extensions layered on SGLang (reliability + accelerator teams)."""
