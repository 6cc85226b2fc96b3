"""Inference-platform fork layered over SGLang.

``platform``: scheduler / overlap team wrappers around SGLang's workers.
``kernels``: MLA decode ports for decode context parallelism (DCP).
"""
