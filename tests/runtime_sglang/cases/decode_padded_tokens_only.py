"""Padding that leaves the batch size alone but adds token rows (attention-TP alignment) is stale too."""

from batches import dp_pad, forward_batch, forward_decides

EXPECT = "caught"
WHY = "a draft-extend batch of 3 x 4 tokens marked ready, its rows padded to 16 with the batch size kept"


def scenario() -> list:
    batch = forward_batch("DRAFT_EXTEND_V2", 3, 12)
    batch.mark_forward_metadata_ready()
    dp_pad(batch, 3, 16)
    return forward_decides(batch)
