"""A stale decision with no attention launch after it (a one-step draft only samples): nothing runs on the plan."""

from batches import dp_pad, forward_batch

EXPECT = "passes"
WHY = "marked for 2 requests, padded to 4, told not to re-plan, and no attention layer runs"


def scenario() -> bool:
    batch = forward_batch("DECODE", 2, 2)
    batch.mark_forward_metadata_ready()
    dp_pad(batch, 4, 4)
    return batch.needs_forward_metadata_init()
