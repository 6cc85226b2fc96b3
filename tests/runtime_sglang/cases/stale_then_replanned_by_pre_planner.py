"""A stale decision, then the pre-planner plans and marks the padded batch again before any launch."""

from batches import CpuBackend, dp_pad, forward_batch, forward_decides, launch

EXPECT = "passes"
WHY = "a stale False answer, then the draft backend re-plans the padded batch and marks it; its layers then run"


def scenario() -> list:
    batch = forward_batch("DRAFT_EXTEND_V2", 2, 6)
    batch.mark_forward_metadata_ready()
    dp_pad(batch, 4, 12)
    stale = batch.needs_forward_metadata_init()
    draft = CpuBackend()
    draft.init_forward_metadata(batch)
    batch.mark_forward_metadata_ready()
    launch(draft, batch)
    return [stale, *forward_decides(batch, draft)]
