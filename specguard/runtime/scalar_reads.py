"""Counting host reads of device values: the proof that the guard adds no device synchronisation.

`.item()`, `int(t)`, `bool(t)` and `.tolist()` all dispatch `aten._local_scalar_dense`, which on a device
tensor waits for the device. Run a call inside `ScalarReads()` with and without the guard and compare the
counts (the tests and the GPU benchmark do). Not imported by the guard itself.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

LOCAL_SCALAR = torch.ops.aten._local_scalar_dense.default


class ScalarReads(TorchDispatchMode):
    """Counts host reads of tensor values inside its `with` block."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func is LOCAL_SCALAR:
            self.count += 1
        return func(*args, **(kwargs or {}))
