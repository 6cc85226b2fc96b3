# SPDX-License-Identifier: Apache-2.0
"""Out-of-tree speculative-decoding extensions for the vLLM MRv2 GPU runner.

Drafters here subclass vLLM's own speculators (EAGLE/MTP, DFlash/DSpark,
multi-module MTP, standalone AR) and add DP-padding, DCP and hardware-port
tweaks carried by our fork.  Nothing in this package is imported eagerly.
"""

__all__: list[str] = []
