"""Reading host-side values without ever touching device memory.

Tensors that may live on a device are only asked for `.shape` and `.dtype`. Values are read only from
objects that are host-side by contract (Python ints, numpy arrays, CPU tensors such as vLLM's
`*_cpu` metadata or the indptr FlashInfer's `plan()` takes) and, for CPU tensors, through `.numpy()`,
which shares memory without dispatching an aten op. A tensor on any other device is a `Skip`, never a sync.
"""

from __future__ import annotations

import numbers
from typing import Any

from specguard.runtime.patching import Skip

_DTYPE_NAMES: dict[Any, str] = {}


def dtype_name(t: Any) -> str:
    dt = t.dtype
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = str(dt).removeprefix("torch.")
        _DTYPE_NAMES[dt] = name
    return name


def host_int(value: Any, what: str) -> int:
    """A plain integer from a host-side scalar: an int, a numpy integer, or a 0-d integer tensor on the CPU
    (vLLM 0.28.0's DP sync hands one on as a uniform token count), read through its numpy view; a device
    tensor is refused rather than read."""
    if type(value) is int:  # the hot path: skip the ABC check below
        return value
    if isinstance(value, numbers.Integral):  # bool, int, numpy integer
        return int(value)
    if getattr(value, "ndim", None) == 0 and getattr(getattr(value, "device", None), "type", None) == "cpu":
        view = host_array(value, what)
        if getattr(view, "dtype", None) is not None and view.dtype.kind in "iub":
            return int(view)
    raise Skip(f"{what} is {type(value).__name__}, not a host integer")


def host_array(t: Any, what: str) -> Any:
    """A numpy view of a host-side 1-D index tensor or array; a device tensor is a Skip."""
    device = getattr(t, "device", None)
    if device is None or isinstance(device, str):
        return t  # numpy array (numpy 2 reports device "cpu" as a string) or sequence
    if getattr(device, "type", None) != "cpu":
        raise Skip(f"{what} is on {device}: reading it would synchronise the device")
    try:
        return t.numpy()
    except Exception as exc:  # noqa: BLE001 -- e.g. requires_grad; do not detach (that dispatches an op)
        raise Skip(f"{what} has no numpy view ({type(exc).__name__})") from exc


def host_list(t: Any, n: int, what: str) -> list:
    """The first n entries of a host 1-D tensor as a list. A tensor of exactly n entries (vLLM slices its buffers
    to the batch) is read whole, without a numpy view, which costs more than the read; a device tensor is a Skip."""
    if getattr(t, "is_cpu", None) is True and t.shape[0] == n:
        return t.tolist()
    return host_array(t, what)[:n].tolist()


def host_last_int(t: Any, what: str) -> int:
    arr = host_array(t, what)
    if len(arr) == 0:
        raise Skip(f"{what} is empty")
    return int(arr[-1])


def rows(t: Any) -> int:
    """Leading dimension of a tensor, or of the first of a (q_nope, q_pe) pair."""
    if isinstance(t, tuple):
        t = t[0]
    return t.shape[0]
