"""The fix's shape: pad first, then plan and mark; the forward keeps a plan made for the padded batch."""

from batches import dp_pad, forward_batch, forward_decides

EXPECT = "passes"
WHY = "padded from 2 to 4 requests before the pre-planner planned and marked it"


def scenario() -> list:
    batch = forward_batch("DRAFT_EXTEND_V2", 2, 4)
    dp_pad(batch, 4, 8)
    batch.mark_forward_metadata_ready()
    return forward_decides(batch)
