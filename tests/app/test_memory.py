"""Memory that stays bounded: what a result holds (gradient_lab.sizes), the guard's estimates against real
reports, and a whole session's resident memory against the budget."""

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gradient_lab.engine import planning as numerical
from gradient_lab.app import guard, views
from gradient_lab.app.case import Case
from gradient_lab.engine.pipeline import compare_gradients
from gradient_lab.errors import LabError
from gradient_lab.app.family import get_family
from gradient_lab.explore.perturb import Perturbation, apply_perturbation
from gradient_lab.sizes import array_bytes

ROOT = Path(__file__).resolve().parents[2]


# ---- what a result holds ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Inner:
    values: np.ndarray
    names: tuple[str, ...] = ("a",)


@dataclasses.dataclass(frozen=True)
class Outer:
    inner: Inner
    per_source: dict
    tensors: list


def test_array_bytes_sums_arrays_through_dataclasses_and_containers():
    result = Outer(
        Inner(np.zeros(100)),  # 800
        {"a": np.zeros((3, 4), dtype=np.float32), torch.zeros(2, dtype=torch.float64): (np.zeros(5, dtype=np.int32),)},  # 48, keys too: 16, 20
        [torch.zeros(10, dtype=torch.float64), frozenset({("b", 1)}), [[np.ones(1)]]],  # 80, 0, 8
    )
    assert array_bytes(result) == 800 + 48 + 16 + 20 + 80 + 8


def test_array_bytes_counts_shared_memory_once():
    a = np.zeros(1000)
    t = torch.from_numpy(a)  # the same buffer as a numpy array and a tensor
    assert array_bytes((a, a, a[::2], a.reshape(10, 100), t, t[5:], t.numpy())) == 8000
    assert array_bytes({"view": a[:10]}) == 8000  # a view keeps its whole buffer alive
    storage = torch.zeros(100)
    assert array_bytes([storage[:10], storage[50:]]) == 400
    assert array_bytes([np.zeros(10), np.zeros(10)]) == 160  # equal, but two buffers


def test_array_bytes_leaves_out_what_is_not_an_array_and_survives_cycles():
    cycle: list = [np.zeros(4)]
    cycle.append(cycle)
    assert array_bytes(cycle) == 32
    assert array_bytes(("a string", 3, 2.5, None, b"bytes", np.float64(1.0), print, Case)) == 0
    objects = np.empty(2, dtype=object)
    objects[:] = [np.zeros(3), np.zeros(4)]
    assert array_bytes(objects) == objects.nbytes + 24 + 32
    assert array_bytes(torch.zeros(0)) == 0


def test_array_bytes_of_a_report_is_what_its_pickle_holds():
    import pickle

    report = views.gradient_report(Case(shape=(16, 32)), "tutorial")
    size = array_bytes(report)
    assert size > 0
    assert 0.9 * size < len(pickle.dumps(report)) < 1.5 * size + 2**20  # the arrays, and a little more


# ---- the guard's estimate against real reports ------------------------------------------------------------


def _no_reference(family: str):
    return dataclasses.replace(get_family(family), reference=None)


REPORTS = [  # (family, formula, shape, perturbation): where the Jacobian's pattern comes from, and how large it is
    (get_family("cosine"), "tutorial", (64, 128), Perturbation()),  # two inputs, 64 outputs: 8,192 entries each
    (get_family("cosine"), "corrected", (64, 128), Perturbation()),
    (get_family("softmax"), "batch-sum", (64, 128), Perturbation()),  # blocks of 128 × 128: 1,048,576 entries, fails and is diagnosed
    (get_family("softmax"), "corrected", (16, 32), Perturbation(inject="nan")),  # outputs left out: entries copied as NaN
    (_no_reference("softmax"), "batch-sum", (16, 32), Perturbation()),  # no reference, no pattern: every entry, dense
    (get_family("normalize"), "no-projection", (16, 32), Perturbation(near_zero_rows=2, near_zero_factor=0.0)),  # a pattern that fails at a zero row
    (get_family("cosine"), "tutorial", (16, 32), Perturbation(near_zero_rows=2, near_zero_factor=0.0)),  # one input dense, the other not
    (get_family("gelu"), "product-rule", (64, 128), Perturbation()),  # elementwise: one colour
]


@pytest.mark.parametrize("family, formula, shape, perturbation", REPORTS,
                         ids=[f"{f.name}{'-noref' if f.reference is None else ''}-{formula}-{'x'.join(map(str, s))}" for f, formula, s, _ in REPORTS])
def test_the_estimate_bounds_what_a_real_report_keeps(family, formula, shape, perturbation):
    inputs = family.build_inputs(shape, seed=0, dtype=torch.float64, device="cpu", **family.params)
    inputs = apply_perturbation(inputs, perturbation, dim=int(family.params.get("dim", -1)), eps=float(family.params.get("eps", 1e-8)), seed=0)
    report = compare_gradients(family, formula, inputs, budget_bytes=guard.chunk_bytes())
    outputs = math.prod(report.jacobian.output_shape)
    plans = [c.plan for c in report.inputs]
    entries = [p.rows.size if p.structured else outputs * p.n_inputs for p in plans]
    kept = array_bytes(report)
    estimate = guard.report_estimate([p.n_inputs for p in plans], outputs, entries)
    assert kept <= estimate.kept <= estimate.peak
    # the guard's first bound, every Jacobian whole, is an upper bound of any plan's
    whole = guard.report_estimate([p.n_inputs for p in plans], outputs, [outputs * p.n_inputs for p in plans])
    assert estimate.peak <= whole.peak
    if perturbation.near_zero_rows or family.reference is None:
        assert any(not p.structured for p in plans)  # the dense case is among those checked
    else:
        assert all(p.structured for p in plans)


def test_a_list_of_reports_is_guarded_with_what_the_earlier_ones_hold(monkeypatch):
    monkeypatch.setattr(guard, "chunk_bytes", lambda: 16 * 2**20)  # the budget set below leaves the chunk alone
    case = Case(formulas=("tutorial", "corrected"), shape=(64, 128))
    held = array_bytes(views.gradient_report(case, "tutorial"))
    need = guard.report_estimate([8192, 8192], 64, [8192, 8192]).peak  # its pattern: each input element in one output
    assert held > 2**20
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", str((need + held / 2) / 2**20))  # room for one report, not for one beside another
    assert views.gradient_report(case, "corrected").verdict.passed
    with pytest.raises(LabError, match=r"Checking gradients of shape \(64, 128\).* more than the budget"):
        views.verdicts(case)


# ---- a whole session against the budget ------------------------------------------------------------------

SESSION_BUDGET_MB = 128  # low, so that the largest settings the guards allow are small and quick to run
SESSION_WORK_LIMIT = "3e8"  # a tenth of the default: the loss surface, bound by work, stays quick too
SLACK = 64 * 2**20  # allocator fragments that cannot be handed back, torch's kernels loaded on first use


@pytest.mark.slow
def test_a_session_at_the_largest_allowed_settings_stays_within_the_budget():
    """Every page's views, each at the largest settings the guards allow, through ``gradient_lab.ui.compute``
    as the pages call them (cached, freed memory handed back), in a fresh process. Its peak resident
    memory must stay within: what the process holds once the libraries are loaded (torch, streamlit,
    the app's lib: measured there, before any computation), the budget (the one computation running),
    the share cached results may keep, the Jacobian patterns gradient_lab.numerical keeps for reuse (bounded
    by their own limit, kept_patterns_limit()) and SLACK."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux's /proc to read resident memory")
    env = {**os.environ, "GRADIENT_LAB_MEMORY_MB": str(SESSION_BUDGET_MB), "GRADIENT_LAB_WORK_LIMIT": SESSION_WORK_LIMIT,
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SESSION], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    budget = SESSION_BUDGET_MB * 2**20
    assert found["budget"] == budget and found["cached"] <= found["cache_limit"] == budget // 2
    ran = {(r["page"], r["view"]): r for r in found["ran"]}
    assert len(ran) == len(found["ran"]) and all(r["ran"] for r in found["ran"]), found["ran"]
    assert all(r["rows"] >= 1 for r in found["ran"]), found["ran"]
    assert found["patterns"] <= numerical.kept_patterns_limit()
    allowance = found["baseline"] + budget + found["cache_limit"] + numerical.kept_patterns_limit() + SLACK
    assert found["peak"] <= allowance, (f"peak {found['peak'] >> 20} MiB > {allowance >> 20} MiB: baseline {found['baseline'] >> 20}, "
                                         f"patterns {found['patterns'] >> 20}; {found['ran']}")


SESSION = r'''
import json, resource
from pathlib import Path

import streamlit  # noqa: F401 - the libraries a server holds
import torch

from gradient_lab.app import budget, views
from gradient_lab.engine import planning as numerical
from gradient_lab.explore import sweeps
from gradient_lab.app.case import Case
from gradient_lab.errors import LabError
from gradient_lab.explore.perturb import Perturbation
from gradient_lab.explore.trajectory import MAX_STEPS
from gradient_lab.ui.compute import cache_limit, cached_bytes, compute


def rss() -> int:
    return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmRSS:")) * 1024


def runs(fn, args) -> bool:
    return compute(fn, *args) is not None  # a refusal is said on the page, and compute gives None


STUBBED = {views.surface: (views, "loss_surface"), views.field: (views, "gradient_field"), views.training: (views, "trajectories"),
           views.perturbation_sweep: (sweeps, "perturbation_sweep"), views.conformance: (views, "conformance_report")}


def allowed(fn, args) -> bool:
    """Whether the guards let fn(*args) through, the computation after them stubbed out."""
    module, name = STUBBED[fn]
    real = getattr(module, name)
    setattr(module, name, lambda *a, **k: None)
    try:
        fn(*args)
        return True
    except LabError:
        return False
    finally:
        setattr(module, name, real)


def largest(fn, settings, high):
    """The largest rows in 1 … high that are let through (settings grow with rows). A report can be
    refused after its guard, by the engine's work limit, and a list of reports holds the earlier
    ones: those are run to find out; the other views' guards come first, so they are asked alone."""
    ask = allowed if fn in STUBBED else runs
    low = 0
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if ask(fn, settings(middle)) else (low, middle - 1)
    return low


compute(views.gradient_report, Case(shape=(2, 3)), "corrected")  # warm: thread pools, vmap, autograd
compute(views.surface, Case(shape=(2, 3)), views.PlaneSpec(), 5, 1.0)
budget.release_freed_memory()
baseline = rss()
plane = views.PlaneSpec()
cosine = lambda rows: Case(family="cosine", formulas=("tutorial", "sign-fixed", "corrected"), shape=(rows, 128))
softmax = lambda rows: Case(family="softmax", formulas=("no-subtract", "batch-sum", "corrected"), shape=(rows, 128))
zero_rows = lambda rows: Case(family="normalize", formulas=("corrected",), shape=(rows, 32), perturbation=Perturbation(near_zero_rows=2, near_zero_factor=0.0))
pages = [  # (page, view, settings by rows, the most rows worth trying)
    ("home", views.verdicts, lambda r: (cosine(r),), 1024),
    ("check", views.gradient_report, lambda r: (softmax(r), "batch-sum"), 128),
    ("check zero rows", views.gradient_report, lambda r: (zero_rows(r), "corrected"), 128),
    ("check sweep", views.gradient_sweep, lambda r: (softmax(r), "corrected"), 128),
    ("check conformance", views.conformance, lambda r: (Case(family="softmax", shape=(r, 64)), "corrected"), 32),
    ("field", views.field, lambda r: (cosine(r), plane, 41, 1.0), 1024),
    ("field contours", views.surface, lambda r: (cosine(r), plane, 41, 1.0), 1024),
    ("surface", views.surface, lambda r: (cosine(r), plane, 201, 1.0), 1024),
    ("surface paths", views.training, lambda r: (cosine(r), plane, "Adam", 0.1, 500), 1024),
    ("lab", views.perturbation_sweep, lambda r: (softmax(r), "input norm"), 2048),
    ("training", views.training, lambda r: (cosine(r), plane, "SGD", 0.1, MAX_STEPS), 1024),
]
ran = []
for page, fn, settings, high in pages:
    rows = largest(fn, settings, high)
    ran.append({"page": page, "view": fn.__name__, "rows": rows, "ran": bool(rows) and runs(fn, settings(rows)),
                "peak_so_far": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})
print(json.dumps({"baseline": baseline, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "budget": budget.memory_budget(), "cache_limit": cache_limit(), "cached": cached_bytes(),
                  "patterns": numerical.kept_patterns_bytes(), "ran": ran}))
'''
