"""The eager extend path plans a target-verify batch whatever needs_forward_metadata_init answers: a stale mark
there is not run."""

from batches import dp_pad, forward_batch, forward_decides

EXPECT = "passes"
WHY = "TARGET_VERIFY marked for 2 x 4 tokens, padded to 4 x 4; the decision is False, EagerRunner re-plans anyway"


def scenario() -> list:
    batch = forward_batch("TARGET_VERIFY", 2, 8)
    batch.mark_forward_metadata_ready()
    dp_pad(batch, 4, 16)
    return forward_decides(batch, replan_anyway=True)
