"""Property-based fuzzing of every page over every control, extremes included: no uncaught
exception, no caught one either (the guard's "Internal error" is a failure here), and every
message shown is readable words meant for the user, not a traceback.

A fixed, derandomized handful of examples per page runs in the normal suite; for a long run:
``GRADIENT_LAB_FUZZ_EXAMPLES=200 make test PYTEST_ARGS="tests/pages/test_fuzz.py"`` (random).
"""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradient_lab.explore.sweeps import METRICS, SWEEPS
from gradient_lab.explore.trajectory import OPTIMIZERS
from gradient_lab.ui.compute import INTERNAL_ERROR
from tests.pages.conftest import app, messages

LONG_RUN = int(os.environ.get("GRADIENT_LAB_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=LONG_RUN or 4,
    derandomize=not LONG_RUN,  # the normal suite sees the same examples every time
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def options(*values) -> st.SearchStrategy:
    return st.sampled_from([str(v) for v in values])


# The URL form of each control (its key is the query parameter), extremes first.
SIDEBAR = {
    "rows": options(1, 2, 3, 64, 4096),
    "features": options(1, 2, 5, 128, 4096),
    "depth": options(0, 1, 3, 64),
    "dim": options(-3, -1, 0, 1, 2),
    "broadcast": options("true", "false"),
    "dtype": options("float64", "float32", "float16", "bfloat16"),
    "device": options("cpu", "cuda", "mps"),
    "seed": options(0, 2**31 - 1),
    "eps": options("0", "1e-12", "1e-08", "1e+01"),
    "step": options("1e-12", "1e-01", "auto (by dtype)"),
    "noise1": options(0.0, 2.0),
    "noise2": options(0.0, 2.0),
    "norm1": options("as drawn", "1e-06", "1", "10000"),
    "norm2": options("as drawn", "1e-06", "10000"),
    "near_zero": options(0, 1, 4096),
    "near_zero_factor": options(0.1, 1.0, 10.0),
    "align": options("none", "parallel", "antiparallel"),
    "align_angle": options(0.0, 90.0),
    "inject": options("none", "nan", "inf"),
    "inject_count": options(1, 1000),
    "formulas_cosine": st.lists(st.sampled_from(["tutorial", "sign-fixed", "norm-fixed", "sign+norm-fixed", "corrected"]),
                                max_size=5, unique=True).map(",".join),
}
PAGES = {
    "app.py": {},
    "pages/1_Gradient_check.py": {
        "check_formula": options("tutorial", "corrected", "norm-fixed"),
        "check_pair": options("analytic-reference", "analytic-numerical", "reference-numerical"),
        "check_relative": options("true", "false"),
        "check_sweep": options("true", "false"),
        "check_conformance": options("true", "false"),
    },
    "pages/2_Gradient_field.py": {
        "field_plane": options("random", "gradient", "coordinates", "input plane"),
        "field_resolution": options(5, 41),
        "field_span": options(0.25, 4),
        "field_coord_a": options(0, 99999),
        "field_row": options(0, 99999),
    },
    "pages/3_Loss_surface.py": {
        "surface_plane": options("random", "gradient", "coordinates", "input plane"),
        "surface_kind": options("2-D surface", "1-D slice"),
        "surface_resolution": options(5, 201),
        "surface_slice_resolution": options(11, 401),
        "surface_log": options("true", "false"),
        "surface_view": options("contours", "3-D"),
        "surface_paths": options("true", "false"),
        "surface_optimizer": options(*OPTIMIZERS),
        "surface_lr": options("0.0001", "10"),
        "surface_steps": options(1, 500),
    },
    "pages/4_Perturbation_lab.py": {"lab_kind": options(*SWEEPS), "lab_metric": options(*METRICS)},
    "pages/5_Training.py": {
        "train_optimizer": options(*OPTIMIZERS),
        "train_lr": options("0.0001", "10"),
        "train_steps": options(1, 2000),
    },
}


def query(controls: dict) -> st.SearchStrategy:
    """Any subset of the controls, each at one of its values."""
    return st.fixed_dictionaries({}, optional=controls)


def assert_readable(at) -> None:
    """No uncaught exception, and no caught one either: every message is words meant for the
    user (a LabError), never the guard's report of a bug."""
    assert not at.exception, [e.value for e in at.exception]
    for message in messages(at):
        assert len(message.strip()) > 10, message
        assert "Traceback" not in message and 'File "' not in message, message
        assert not message.startswith(INTERNAL_ERROR), message


@pytest.mark.parametrize("page", list(PAGES))
@FUZZ
@given(data=st.data())
def test_any_combination_of_controls_gives_a_page_or_words(page, data):
    sidebar = data.draw(query(SIDEBAR), label="sidebar")
    controls = data.draw(query(PAGES[page]), label="page controls")
    assert_readable(app(page, **sidebar, **controls))


# What fuzzing found, kept as regressions.
FOUND = [
    ("pages/1_Gradient_check.py", {"rows": "1", "inject": "nan", "check_sweep": "true"}),  # all-NaN step sweep
    ("pages/3_Loss_surface.py", {"rows": "1", "features": "1"}),  # a degenerate plane (u ∥ v)
    ("app.py", {"inject": "inf", "inject_count": "1000"}),  # every output not finite: an empty bincount
    ("app.py", {"features": "1"}),  # rows of one element: cosine ±1, gradient 0
    ("pages/1_Gradient_check.py", {"features": "1"}),
    ("pages/5_Training.py", {"family": "layernorm", "inject": "nan", "noise1": "2.0", "train_optimizer": "SGD + momentum"}),  # PCA on NaN
    ("pages/5_Training.py", {"inject": "nan", "train_optimizer": "SGD"}),
    ("pages/5_Training.py", {"family": "gelu", "inject": "inf", "train_optimizer": "SGD"}),
    ("pages/3_Loss_surface.py", {"inject": "inf"}),  # a plane fitted through Inf
    ("pages/2_Gradient_field.py", {"inject": "nan"}),
    *[("app.py", {key: value}) for key in ("seed", "rows", "features", "depth", "near_zero", "inject_count", "near_zero_factor", "eps")
      for value in ("inf", "-inf", "nan", "1e309", "99999999999999999999999", "")],  # hostile numbers in a link
]


@pytest.mark.parametrize("page, link", FOUND)
def test_what_fuzzing_found_stays_fixed(page, link):
    assert_readable(app(page, **link))
