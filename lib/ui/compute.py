"""Computations for a page: cached by their plain arguments, with a spinner and a progress
bar, and every failure said in words on the page instead of a traceback."""

from __future__ import annotations

import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import streamlit as st

from lib.errors import LabError
from lib.progress import listening

try:  # Streamlit's own flag for "inside a cached function"; internal, so optional
    from streamlit.runtime.scriptrunner_utils.script_run_context import in_cached_function
except ImportError:  # pragma: no cover
    in_cached_function = None


INTERNAL_ERROR = "Internal error"  # how a caught crash begins: tests tell it from a message meant for the user
CACHED_RESULTS = 64  # per function: results are copies, so each session gets its own


_CACHED: dict[Callable[..., Any], Callable[..., Any]] = {}


def cached(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` wrapped by ``st.cache_data`` once: the function handed in is the one cached and
    called, keyed by its plain arguments."""
    if fn not in _CACHED:
        _CACHED[fn] = st.cache_data(max_entries=CACHED_RESULTS, show_spinner=False)(fn)
    return _CACHED[fn]


def _progress(bar, what: str) -> Callable[[float], None]:
    """Moves ``bar`` from inside a cached call without recording the update in the cached
    result (a replayed update would point at a bar that no longer exists)."""

    def update(fraction: float) -> None:
        if in_cached_function is None:  # this Streamlit keeps no such flag: nothing to hide
            bar.progress(fraction, text=what)
            return
        token = in_cached_function.set(False)
        try:
            bar.progress(fraction, text=what)
        finally:
            in_cached_function.reset(token)

    return update


def compute(fn: Callable[..., Any], *args: Any, what: str = "Computing…") -> Any | None:
    """``fn(*args)`` from ``lib.views``, cached by its plain arguments, with a spinner and a
    progress bar; a LabError or any failure becomes a message on the page and None."""
    with guard(what.rstrip("…")):
        bar = st.empty()
        with st.spinner(what), listening(_progress(bar, what)):
            result = cached(fn)(*args)
        bar.empty()
        return result
    return None


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Whatever fails inside is said in words on the page, and the rest of the page goes on. A
    LabError is a message meant for the user; any other exception is a bug, shown as one
    (``INTERNAL_ERROR``), so that tests can tell the two apart."""
    try:
        yield
    except LabError as error:
        st.error(str(error), icon="⚠️")
    except Exception as error:  # noqa: BLE001 - never a traceback on the page; still a bug, and said so
        frame = traceback.extract_tb(error.__traceback__)[-1]
        st.error(f"{INTERNAL_ERROR} in {what.lower()}: {type(error).__name__}: {error} (in {frame.name}, "
                 f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}). This is a bug in Gradient Lab, not in your settings.", icon="🛑")


