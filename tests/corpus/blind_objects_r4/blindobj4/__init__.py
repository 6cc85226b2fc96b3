# SPDX-License-Identifier: Apache-2.0
"""Fork-local speculative-decoding extensions on top of vLLM's GPU worker."""
