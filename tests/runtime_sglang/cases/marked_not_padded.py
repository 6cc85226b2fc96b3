"""A pre-planned batch that no padding touched keeps a plan that fits it."""

from batches import forward_batch, forward_decides

EXPECT = "passes"
WHY = "multi-step draft decode planned and marked for 4 requests, run as planned"


def scenario() -> list:
    batch = forward_batch("DECODE", 4, 4)
    batch.mark_forward_metadata_ready()
    return forward_decides(batch)
