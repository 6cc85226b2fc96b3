# SPDX-License-Identifier: Apache-2.0
"""Fork-local speculators, model states, KV-cache specs and attention backends.

These modules are layered on top of upstream vLLM's GPU model runner
(``vllm.v1.worker.gpu``) and are imported by the fork's runner plugins.
"""
