"""How many bytes of array data a result holds: what a cache of results, and the memory guard's
tests, count.

``array_bytes`` walks a result (dataclasses, tuples, lists, sets, dicts, keys included) and sums
the bytes of every numpy array and torch tensor it reaches. Memory is counted once however many
times it is reached: an array and its views, a tensor and the numpy arrays that share its storage,
the same array kept under two names (a plan's pattern and the verdict's entries) all count their
buffer once, whole (a view keeps its whole buffer alive). Everything else (numbers, strings, the
containers themselves) is left out: in the results of ``lib.app.views`` it is a few KiB beside arrays
of up to hundreds of MiB. Functions, classes and modules are not walked into.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

_CONTAINERS = (list, tuple, set, frozenset)


def array_bytes(result: Any) -> int:
    """Bytes of the distinct array buffers (numpy arrays, torch tensors) reachable from ``result``."""
    seen_objects: set[int] = set()
    buffers: dict[int, int] = {}  # one entry per buffer: its address -> bytes
    stack = [result]
    while stack:
        obj = stack.pop()
        if obj is None or isinstance(obj, (str, bytes, int, float, complex, bool, np.generic, type)):
            continue
        if id(obj) in seen_objects:
            continue
        seen_objects.add(id(obj))
        if isinstance(obj, np.ndarray):
            _add_array(obj, buffers)
            if obj.dtype == object:
                stack.extend(obj.ravel().tolist())
        elif isinstance(obj, torch.Tensor):
            _add_tensor(obj, buffers)
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, _CONTAINERS):
            stack.extend(obj)
        elif dataclasses.is_dataclass(obj):
            stack.extend(getattr(obj, f.name) for f in dataclasses.fields(obj))
    return sum(buffers.values())


def _add_array(array: np.ndarray, buffers: dict[int, int]) -> None:
    owner = array
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    if isinstance(owner.base, torch.Tensor):  # memory a tensor owns: counted as that tensor's storage
        _add_tensor(owner.base, buffers)
    else:  # its own memory, or a buffer from elsewhere (bytes, mmap): at least what it spans of it
        _add(buffers, owner.__array_interface__["data"][0], owner.nbytes, owner)


def _add_tensor(tensor: torch.Tensor, buffers: dict[int, int]) -> None:
    try:
        storage = tensor.untyped_storage()
        _add(buffers, storage.data_ptr(), storage.nbytes(), tensor)
    except (RuntimeError, NotImplementedError):  # sparse and other layouts without one storage
        _add(buffers, 0, tensor.element_size() * tensor.nelement(), tensor)


def _add(buffers: dict[int, int], address: int, size: int, owner: object) -> None:
    """A buffer is known by its address (numpy and torch may share one); without an address
    (empty, meta or sparse memory), by its owner."""
    key = address if address else -id(owner)
    buffers[key] = max(buffers.get(key, 0), size)
