"""lib/ui helpers that need no running page: downloads' text, default choices, and the cache of
results, bounded in entries and in bytes."""

import importlib
import json
import math

import numpy as np
import streamlit as st

from gradient_lab.app.family import get_family
from gradient_lab.ui.downloads import _plain, csv_text
from gradient_lab.app.case import default_formulas


def test_csv_text_has_a_header_and_a_row_per_dict():
    text = csv_text([{"formula": "tutorial", "error": 1.5}, {"formula": "corrected", "error": 0.0}])
    assert text.splitlines() == ["formula,error", "tutorial,1.5", "corrected,0.0"]
    assert csv_text([]) == ""


def test_plain_makes_json_safe_values():
    data = _plain({"a": np.array([1.0, math.nan]), "b": np.float32(2.5), "c": (np.int64(3), math.inf)})
    assert json.loads(json.dumps(data)) == {"a": [1.0, "nan"], "b": 2.5, "c": [3, "inf"]}


def test_default_formulas_are_two_wrong_and_every_correct_one():
    assert default_formulas(get_family("cosine")) == ["tutorial", "sign-fixed", "corrected"]


# ---- the cache of results: bounded in entries and in bytes ---------------------------------------------


def test_the_ledger_drops_the_oldest_first_to_stay_within_its_bytes():
    from gradient_lab.ui.compute import _Ledger

    ledger, f, g = _Ledger(), object(), object()
    assert ledger.record(f, (1,), 40, limit=100, per_function=10) == []
    assert ledger.record(g, ("a",), 40, limit=100, per_function=10) == []
    assert ledger.record(f, (1,), 40, limit=100, per_function=10) == []  # used again: counted once, now the newest
    assert ledger.total == 80 and len(ledger) == 2
    assert ledger.record(f, (2,), 30, limit=100, per_function=10) == [(g, ("a",))]  # the least recently used goes
    assert ledger.total == 70
    assert ledger.record(g, ("big",), 500, limit=100, per_function=10) == [(f, (1,)), (f, (2,)), (g, ("big",))]  # too large to keep at all
    assert ledger.total == 0 and len(ledger) == 0


def test_the_ledger_keeps_a_bounded_number_of_entries_per_function():
    from gradient_lab.ui.compute import _Ledger

    ledger, f, g = _Ledger(), object(), object()
    ledger.record(f, (0,), 1, limit=10**9, per_function=2)
    ledger.record(g, (0,), 1, limit=10**9, per_function=2)
    ledger.record(f, (1,), 1, limit=10**9, per_function=2)
    assert ledger.record(f, (2,), 1, limit=10**9, per_function=2) == [(f, (0,))]  # f's oldest, not g's
    assert len(ledger) == 3
    unhashable = ([1, 2],)  # keyed by its pickle
    ledger.record(g, unhashable, 5, limit=10**9, per_function=5)
    ledger.record(g, unhashable, 5, limit=10**9, per_function=5)
    assert ledger.total == 3 + 5


def test_the_ledger_stays_consistent_under_threads():
    import threading

    from gradient_lab.ui.compute import _Ledger

    ledger, f = _Ledger(), object()
    dropped = []

    def work(start):
        for i in range(start, start + 500):
            dropped.extend(ledger.record(f, (i % 300,), 7, limit=7 * 100, per_function=1000))

    threads = [threading.Thread(target=work, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.total == 7 * len(ledger) <= 7 * 100


def test_cached_results_stay_within_their_share_of_the_budget(monkeypatch):
    import numpy as np
    import streamlit as st

    compute = importlib.import_module("gradient_lab.ui.compute")  # the module: gradient_lab.ui's own ``compute`` is its function

    calls = []

    def result(index: int, mib: int):
        calls.append(index)
        return {"values": np.zeros(mib * 2**20 // 8)}

    st.cache_data.clear()
    compute._LEDGER.clear()
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "16")  # cached results: 8 MiB
    assert compute.cache_limit() == 8 * 2**20
    fn = compute.cached(result)
    first = fn(0, 3)
    first["values"][:] = 1.0  # a careless page mutating its result
    assert (fn(0, 3)["values"] == 0).all() and calls == [0]  # a copy, from the cache
    fn(1, 3)
    fn(2, 3)  # 9 MiB: the oldest, 0, goes
    assert compute.cached_bytes() == 6 * 2**20
    fn(1, 3)
    fn(2, 3)
    assert calls == [0, 1, 2]
    fn(0, 3)
    assert calls == [0, 1, 2, 0]  # computed again
    fn(3, 9)
    fn(3, 9)
    assert calls == [0, 1, 2, 0, 3, 3] and compute.cached_bytes() == 0  # larger than the share: never kept
    st.cache_data.clear()
    compute._LEDGER.clear()


def test_progress_moves_the_bar_and_hands_freed_memory_back(monkeypatch):
    compute = importlib.import_module("gradient_lab.ui.compute")
    released, moved, resident = [], [], [10**9]
    monkeypatch.setattr(compute, "_RELEASE", compute._Releaser())
    monkeypatch.setattr(compute, "release_freed_memory", lambda: released.append(resident[0]) or True)
    monkeypatch.setattr(compute, "resident_bytes", lambda: resident[0])
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "1600")  # a step: 100 MiB

    class Bar:
        def progress(self, fraction, text):
            moved.append((fraction, text))

    update = compute._progress(Bar(), "Working…")
    update(0.25)  # the first time: hands back what there is
    resident[0] += 50 * 2**20
    update(0.5)  # grown by less than a step: nothing
    resident[0] += 60 * 2**20
    update(1.0)  # grown by more: hands back
    assert moved == [(0.25, "Working…"), (0.5, "Working…"), (1.0, "Working…")]
    assert released == [10**9, 10**9 + 110 * 2**20]


# ---- the warmed server: Home at defaults answered from what it checked ahead ----------------------------


def test_the_warmed_server_answers_home_at_defaults_without_checking_again(monkeypatch):
    from gradient_lab.app import views
    from gradient_lab.ui import serve
    from tests.pages.conftest import app

    st.cache_data.clear()
    serve.warm()
    checked = []
    report = views._report
    monkeypatch.setattr(views, "_report", lambda case, formula, **kw: checked.append((case.seed, formula)) or report(case, formula, **kw))
    at = app()  # a first visit at defaults: the sidebar's case is the one warmed
    assert not at.exception and len([m for m in at.markdown if m.value.startswith("##### ")]) == 3
    assert checked == []
    app(seed=3)  # any other case is checked when asked
    assert {formula for _, formula in checked} == {"tutorial", "sign-fixed", "corrected"}
    st.cache_data.clear()


# ---- how long the same work took: what a spinner announces ------------------------------------------------------


def test_a_spinner_expects_what_the_same_work_took_at_another_draw_and_guesses_from_another_formula():
    from dataclasses import replace

    from gradient_lab.app import views
    from gradient_lab.app.case import Case
    from gradient_lab.explore.perturb import Perturbation

    from gradient_lab.ui.compute import _Durations

    durations = _Durations()
    case = Case(shape=(512, 512))
    durations.record(views.gradient_report, (case, "tutorial"), 7.0)
    redrawn = replace(case, seed=5, perturbation=Perturbation(noise1=0.1))
    assert durations.expected(views.gradient_report, (redrawn, "tutorial")) == 7.0  # another draw: the same work
    assert durations.expected(views.gradient_report, (redrawn, "corrected")) == 7.0  # another formula of the case: a guess
    assert durations.expected(views.gradient_report, (replace(case, shape=(8, 16)), "tutorial")) is None  # another size
    assert durations.expected(views.first_verdict, (case, "tutorial")) is None  # other work
    durations.record(views.gradient_report, (case, "tutorial"), 0.01)  # answered by the cache: not the work's time
    assert durations.expected(views.gradient_report, (case, "tutorial")) == 7.0
