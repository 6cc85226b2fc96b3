"""DP padding to the group's maximum, when this rank already has it, changes nothing."""

from batches import dp_pad, forward_batch, forward_decides

EXPECT = "passes"
WHY = "this rank holds the DP group's largest batch (3 x 2 tokens): padded to the same shape"


def scenario() -> list:
    batch = forward_batch("DRAFT_EXTEND_V2", 3, 6)
    batch.mark_forward_metadata_ready()
    dp_pad(batch, 3, 6)
    return forward_decides(batch)
