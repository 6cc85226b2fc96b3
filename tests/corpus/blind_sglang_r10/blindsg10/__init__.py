"""Fork-local speculative decoding extensions layered on top of SGLang.

Nothing here replaces SGLang modules; every class subclasses the upstream
worker / runner / attention backend and overrides one step.
"""
