"""Older callers pass skip_attn_backend_init=True; SGLang maps it onto the mark, so padding after it is stale."""

import warnings

from batches import dp_pad, forward_batch, forward_decides

EXPECT = "caught"
WHY = "skip_attn_backend_init=True (mapped to the mark) on a DECODE batch of 3, padded by DP to 5"


def scenario() -> list:
    batch = forward_batch("DECODE", 3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        batch.apply_deprecated_skip_attn_backend_init(True)
    dp_pad(batch, 5, 5)
    return forward_decides(batch)
