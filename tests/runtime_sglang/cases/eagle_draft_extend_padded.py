"""The 0.5.23 class-1 instance: the EAGLE draft-extend path plans for the real batch and marks it ready, then DP
padding grows it; the forward keeps the stale plan."""

from batches import dp_pad, forward_batch, forward_decides

EXPECT = "caught"
WHY = "plan + mark (no replan_equivalent) for 2 requests x 3 tokens, padded by DP to 4 x 3; no re-plan, layers run"


def scenario() -> list:
    batch = forward_batch("DRAFT_EXTEND_V2", 2, 6)
    batch.mark_forward_metadata_ready()  # after draft_attn_backend.init_forward_metadata(batch)
    dp_pad(batch, 4, 12)
    return forward_decides(batch)
