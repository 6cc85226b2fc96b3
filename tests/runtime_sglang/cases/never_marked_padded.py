"""An unmarked batch is planned by the forward itself, after padding."""

from batches import dp_pad, forward_batch, forward_decides

EXPECT = "passes"
WHY = "a target EXTEND batch nobody pre-planned, padded from 2 to 3: the forward plans (True)"


def scenario() -> list:
    batch = forward_batch("EXTEND", 2, 8)
    dp_pad(batch, 3, 12)
    return forward_decides(batch)
