"""A mark that declares the forward's own plan equivalent: SGLang re-plans the padded batch."""

from batches import dp_pad, forward_batch, forward_decides

EXPECT = "passes"
WHY = "mark_forward_metadata_ready(replan_equivalent=True), padded from 2 to 4: needs_forward_metadata_init is True"


def scenario() -> list:
    batch = forward_batch("DECODE", 2, 2)
    batch.mark_forward_metadata_ready(replan_equivalent=True)
    dp_pad(batch, 4, 4)
    decision, planned = forward_decides(batch)
    assert decision is True
    return [decision, planned]
