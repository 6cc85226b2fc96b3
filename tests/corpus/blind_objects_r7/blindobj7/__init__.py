# SPDX-License-Identifier: Apache-2.0
"""specfork: a downstream fork of vLLM's GPU-runner speculators.

The fork carries its own speculator families (a legacy 0.28-style draft base,
stepwise bases used by the internal AR drafters), a few DFlash/DSpark/MTP/EAGLE
variants, model states, MLA KV-cache specs and a FlashInfer MLA backend fork.
"""
