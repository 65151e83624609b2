"""Progress of long computations, reported without the maths knowing who listens.

The UI installs a listener around a call (``listening``); library loops call ``report`` with the
fraction done. With no listener, ``report`` does nothing, so tests and scripts pay nothing.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

_listener: ContextVar[Callable[[float], None] | None] = ContextVar("progress_listener", default=None)


def report(fraction: float) -> None:
    listener = _listener.get()
    if listener is not None:
        listener(min(max(fraction, 0.0), 1.0))


@contextmanager
def listening(listener: Callable[[float], None]) -> Iterator[None]:
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)
