"""Computations for a page: cached by their plain arguments (bounded in entries and in bytes),
with a spinner and a progress bar, and every failure said in words on the page instead of a
traceback."""

from __future__ import annotations

import functools
import pickle
import threading
import time
import traceback
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Hashable, Iterator

import streamlit as st

from ..app.budget import memory_budget, release_freed_memory, resident_bytes
from ..errors import LabError
from ..progress import listening
from ..sizes import array_bytes

in_cached_function: ContextVar[bool] | None
try:  # Streamlit's own flag for "inside a cached function"; internal, so optional
    from streamlit.runtime.scriptrunner_utils.script_run_context import in_cached_function
except ImportError:  # pragma: no cover
    in_cached_function = None


INTERNAL_ERROR = "Internal error"  # how a caught crash begins: tests tell it from a message meant for the user
CACHED_RESULTS = 64  # per function: results are copies, so each session gets its own
# Cached results together take at most this share of the memory budget, the oldest dropped first.
# A computation may take the whole budget while it runs (its guard says so), so while one runs the
# process holds the libraries, the budget and this share; half keeps many results (a 64×128 report
# keeps a few MiB, the largest the guard allows some hundreds) while bounding what idle results cost.
CACHE_SHARE = 0.5


def cache_limit() -> int:
    """The bytes all cached results together may take: a share of the memory budget."""
    return int(CACHE_SHARE * memory_budget())


class _Ledger:
    """What ``st.cache_data`` holds for the functions ``cached`` wraps, entry by entry (a function
    and its arguments) with the bytes of its arrays (``lib.sizes.array_bytes``), least recently
    used first; thread-safe (sessions run in threads). It says which entries to drop; dropping them
    is the caller's (``CachedFunc.clear`` with their arguments).

    It only counts what went through ``cached``: an entry that Streamlit dropped by itself
    (``st.cache_data.clear()``) stays counted until it is used again (counted afresh) or dropped
    as the oldest, so the total errs on the high side, never the low."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[Any, tuple, int]] = OrderedDict()  # key -> (wrapped, args, bytes)
        self._counts: dict[Any, int] = {}  # entries per wrapped function
        self._bytes = 0

    @property
    def total(self) -> int:
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def record(self, wrapped, args: tuple, size: int, limit: int, per_function: int) -> list[tuple[Any, tuple]]:
        """Note that ``wrapped(*args)`` is cached and ``size`` bytes, as its most recent use; return
        the entries to drop, (wrapped, args) oldest first, so that every function keeps at most
        ``per_function`` entries and all together at most ``limit`` bytes: this one too if it alone
        is larger."""
        key = _key(wrapped, args)
        with self._lock:
            self._pop(key)
            self._entries[key] = (wrapped, args, size)
            self._counts[wrapped] = self._counts.get(wrapped, 0) + 1
            self._bytes += size
            victims = []
            if self._counts[wrapped] > per_function and (victim := self._pop(next(k for k, (w, _, _) in self._entries.items() if w is wrapped))):
                victims.append(victim)
            while self._bytes > limit and (victim := self._pop(next(iter(self._entries)))):
                victims.append(victim)
            return victims

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._counts.clear()
            self._bytes = 0

    def _pop(self, key: Hashable) -> tuple[Any, tuple] | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        wrapped, args, size = entry
        self._counts[wrapped] -= 1
        self._bytes -= size
        return wrapped, args


def _key(wrapped, args: tuple) -> Hashable:
    try:
        hash(args)
        return wrapped, args
    except TypeError:  # an argument that is not hashable: its pickle stands in for it
        return wrapped, pickle.dumps(args)


_LEDGER = _Ledger()
_CACHED: dict[Callable[..., Any], Callable[..., Any]] = {}


def cached(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` wrapped by ``st.cache_data`` once: the function handed in is the one cached and
    called, keyed by its plain arguments; each session gets its own copy of a result. Results are
    bounded in entries (``CACHED_RESULTS`` per function) and in bytes (``cache_limit``, all
    functions together), the least recently used dropped first."""
    if fn not in _CACHED:
        store = st.cache_data(show_spinner=False)(fn)

        @functools.wraps(fn)
        def call(*args: Any) -> Any:
            result = store(*args)
            for wrapped, victim_args in _LEDGER.record(store, args, array_bytes(result), cache_limit(), CACHED_RESULTS):
                wrapped.clear(*victim_args)  # outside the ledger's lock: Streamlit takes its own
            return result

        call.clear = store.clear  # type: ignore[attr-defined]
        _CACHED[fn] = call
    return _CACHED[fn]


def forget_all() -> None:
    """Drop every cached result (a user's module changed: results computed with its old code do not apply)."""
    for call in _CACHED.values():
        call.clear()  # type: ignore[attr-defined]  # set on each wrapper by cached() above
    _LEDGER.clear()


def cached_bytes() -> int:
    """The bytes the cached results take together, as counted when they were stored."""
    return _LEDGER.total


class _Releaser:
    """Hands freed memory back to the system (``lib.app.budget.release_freed_memory``) whenever the
    process has grown by a step (a sixteenth of the budget) since it last did: between the chunks
    of a long computation, which report their progress, and after every computation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._after: int | None = None  # resident bytes after the last release

    def __call__(self, always: bool = False) -> None:
        resident = resident_bytes()
        if resident is None:
            return
        with self._lock:
            if not always and self._after is not None and resident < self._after + memory_budget() // 16:
                return
            release_freed_memory()
            self._after = resident_bytes()


_RELEASE = _Releaser()


def _progress(bar, what: str) -> Callable[[float], None]:
    """Moves ``bar`` from inside a cached call without recording the update in the cached
    result (a replayed update would point at a bar that no longer exists); between chunks, hands
    memory freed by the last ones back to the system."""

    def update(fraction: float) -> None:
        _RELEASE()
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
    """``fn(*args)`` from ``lib.app.views``, cached by its plain arguments, with a spinner that
    counts the seconds (and says how many to expect where the same work took several before) and
    a progress bar; a LabError or any failure becomes a message on the page and None."""
    with guard(what.rstrip("…")):
        bar = st.empty()
        expected = _DURATIONS.expected(fn, args)
        told = what if expected is None else f"{what} (about {expected:.0f} s, as the same work took before)"
        start = time.perf_counter()
        try:
            with st.spinner(told, show_time=True), listening(_progress(bar, told)):
                result = cached(fn)(*args)
        finally:
            _RELEASE(always=True)  # what the computation freed, before the page draws
        _DURATIONS.record(fn, args, time.perf_counter() - start)
        bar.empty()
        return result
    return None


class _Durations:
    """How long each kind of work took last: by function and its arguments with every Case made
    seed- and perturbation-free (``Case.cost``: another draw at the same size costs the same), and by
    function and Case alone (another formula of the same case: a first guess). Only work that took
    ``WORTH_SAYING`` or more is remembered; it is what a spinner announces."""

    WORTH_SAYING = 3.0  # seconds

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: OrderedDict[Hashable, float] = OrderedDict()

    @staticmethod
    def _keys(fn: Callable[..., Any], args: tuple) -> tuple[Hashable, ...]:
        costs = tuple(a.cost() if hasattr(a, "cost") else a for a in args)
        try:
            hash(costs)
        except TypeError:
            costs = tuple(repr(c) for c in costs)
        cases = tuple(c for c in costs if hasattr(c, "cost"))
        return ((fn, costs), (fn, cases)) if cases and len(cases) < len(costs) else ((fn, costs),)

    def expected(self, fn: Callable[..., Any], args: tuple) -> float | None:
        with self._lock:
            return next((self._seconds[key] for key in self._keys(fn, args) if key in self._seconds), None)

    def record(self, fn: Callable[..., Any], args: tuple, seconds: float) -> None:
        if seconds < self.WORTH_SAYING:  # quick, or answered by the cache: nothing worth announcing
            return
        with self._lock:
            for key in self._keys(fn, args):
                self._seconds[key] = seconds
                self._seconds.move_to_end(key)
            while len(self._seconds) > 256:
                self._seconds.popitem(last=False)


_DURATIONS = _Durations()


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


