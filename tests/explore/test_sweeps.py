"""Perturbation sweeps: each formula's gradient error as one knob of the case is turned."""

import math
from dataclasses import replace

import numpy as np
import pytest

from gradient_lab.app import family as registry
from gradient_lab.app.case import Case
from gradient_lab.errors import LabError
from gradient_lab.explore.perturb import Perturbation
from gradient_lab.explore.sweeps import METRICS, SWEEPS, perturbation_sweep, point_case, sweep_bytes
from tests.specimens.toys import broken_square_family

COSINE = Case(formulas=("tutorial", "sign-fixed", "norm-fixed", "corrected"), shape=(6, 5))


@pytest.fixture(scope="module")
def norm_sweep():
    return perturbation_sweep(COSINE, "input norm")


def test_input_norm_sweep_spans_unit_norm_on_a_log_axis(norm_sweep):
    assert norm_sweep.values[0] == pytest.approx(1e-3) and norm_sweep.values[-1] == pytest.approx(1e3)
    assert 1.0 in norm_sweep.values and norm_sweep.log_x
    assert norm_sweep.marker == (1.0, "unit norm")
    assert norm_sweep.formulas == COSINE.formulas
    assert all(p is None for problems in norm_sweep.problems.values() for p in problems)


def test_sign_fixed_is_right_only_at_unit_norm(norm_sweep):
    error = norm_sweep.max_abs["sign-fixed"]
    unit = norm_sweep.values.index(1.0)
    assert error[unit] < 1e-12
    away = np.delete(error, unit)
    assert (away > 1e-3).all()
    # and it grows away from unit norm on both sides
    assert (np.diff(error[: unit + 1]) < 0).all() and (np.diff(error[unit:]) > 0).all()
    assert norm_sweep.cosine["sign-fixed"][unit] == pytest.approx(1.0, abs=1e-12)


def test_the_tutorial_is_exactly_flipped_at_unit_norm(norm_sweep):
    unit = norm_sweep.values.index(1.0)
    assert norm_sweep.cosine["tutorial"][unit] == pytest.approx(-1.0, abs=1e-12)
    assert norm_sweep.max_rel["tutorial"][unit] == pytest.approx(2.0, rel=1e-9)  # −g against g
    assert (np.abs(norm_sweep.cosine["norm-fixed"] + 1) < 1e-12).all()  # flipped at every norm


def test_the_corrected_formula_stays_right_over_the_whole_norm_sweep(norm_sweep):
    assert (norm_sweep.max_abs["corrected"] <= 1e-10).all()
    assert (norm_sweep.max_rel["corrected"] <= 1e-10).all()
    assert (np.abs(norm_sweep.cosine["corrected"] - 1) < 1e-12).all()


def test_eps_sweep_shows_where_the_clamp_differs():
    case = Case(formulas=("sign+norm-fixed", "corrected"), shape=(6, 5))
    result = perturbation_sweep(case, "eps")
    assert result.values[0] == pytest.approx(1e-12) and result.values[-1] == pytest.approx(10.0) and result.log_x
    assert result.marker == (1e-8, "this case's eps")
    assert (result.max_abs["corrected"] <= 1e-10).all()
    small = [i for i, v in enumerate(result.values) if v <= 1e-3]
    assert (result.max_rel["sign+norm-fixed"][small] < 1e-10).all()  # no row is clamped: right
    assert result.max_rel["sign+norm-fixed"][-1] > 1e-3  # eps = 10 clamps every row: not PyTorch's gradient


def test_dtype_sweep_measures_against_the_float64_reference():
    case = Case(formulas=("tutorial", "corrected"), shape=(6, 5))
    result = perturbation_sweep(case, "dtype")
    assert result.values == ("float64", "float32", "float16", "bfloat16") and not result.log_x
    corrected = dict(zip(result.values, result.max_abs["corrected"]))
    assert corrected["float64"] < 1e-14 < corrected["float32"] < 1e-5
    assert corrected["float32"] < corrected["float16"] and corrected["float32"] < corrected["bfloat16"]
    assert (result.max_rel["tutorial"] > 0.5).all()  # wrong at every precision
    assert result.dtype == "each"


def test_a_formula_that_raises_is_reported_not_raised():
    case = Case(formulas=("tutorial", "corrected"), shape=(4, 5, 3))  # the tutorial reduces over the wrong dim
    result = perturbation_sweep(case, "noise scale", values=(0.0, 0.5))
    assert all("RuntimeError" in p for p in result.problems["tutorial"])
    assert np.isnan(result.max_abs["tutorial"]).all()
    assert (result.max_abs["corrected"] < 1e-10).all() and result.problems["corrected"] == (None, None)
    rows = result.rows()
    assert len(rows) == 4 and rows[0]["formula"] == "tutorial" and "RuntimeError" in rows[0]["problem"]
    assert set(rows[0]) >= {"max abs error", "max relative error", "cosine to reference", "problem", result.axis_title}


def test_angle_maps_0_to_180_onto_parallel_and_antiparallel():
    assert point_case(COSINE, "angle", 30.0).perturbation.align == "parallel"
    assert point_case(COSINE, "angle", 30.0).perturbation.align_angle == 30.0
    turned = point_case(COSINE, "angle", 150.0).perturbation
    assert (turned.align, turned.align_angle) == ("antiparallel", 30.0)
    x1, x2 = point_case(COSINE, "angle", 60.0).inputs()
    cosines = (x1 * x2).sum(1) / (x1.norm(dim=1) * x2.norm(dim=1))
    np.testing.assert_allclose(cosines.numpy(), math.cos(math.radians(60)), atol=1e-12)
    result = perturbation_sweep(replace(COSINE, formulas=("sign-fixed", "corrected")), "angle")
    middle = [i for i, v in enumerate(result.values) if 0 < v < 180]
    assert (result.cosine["corrected"][middle] > 1 - 1e-9).all() and result.marker == (90.0, "orthogonal")


def test_near_zero_and_noise_sweeps_keep_the_other_perturbations():
    case = replace(COSINE, formulas=("corrected",), perturbation=Perturbation(noise2=0.5))
    point = point_case(case, "near-zero norm", 0.5).perturbation
    assert point.noise2 == 0.5 and point.near_zero_factor == 0.5 and point.near_zero_rows >= 6
    x1, _ = point_case(case, "near-zero norm", 0.5).inputs()
    np.testing.assert_allclose(x1.norm(dim=1).numpy(), 0.5e-8, rtol=1e-9)  # every row at 0.5 · eps
    result = perturbation_sweep(case, "near-zero norm")
    assert (result.max_rel["corrected"] < 1e-8).all() and result.marker == (1.0, "norm = eps")
    noise = perturbation_sweep(case, "noise scale")
    assert noise.values[0] == 0.0 and noise.values[-1] == 2.0 and not noise.log_x and noise.marker is None


@pytest.fixture
def one_input_toy():
    family = registry.register(broken_square_family())
    yield Case(family=family.name, formulas=("broken",), shape=(4, 5))
    assert registry.unregister(family.name) is family


def test_settings_where_a_sweep_cannot_apply_say_so(one_input_toy):
    toy = one_input_toy
    with pytest.raises(LabError, match="no eps parameter"):
        perturbation_sweep(toy, "eps")
    with pytest.raises(LabError, match="one input"):
        perturbation_sweep(toy, "angle")
    result = perturbation_sweep(toy, "input norm")  # one input: its norm alone
    assert (result.max_abs["broken"] > 0.5).all()
    with pytest.raises(LabError, match="broadcasting off"):
        perturbation_sweep(replace(COSINE, broadcast=True), "angle")
    with pytest.raises(LabError, match="Unknown perturbation"):
        perturbation_sweep(COSINE, "temperature")
    with pytest.raises(LabError, match="eps above 0"):
        perturbation_sweep(replace(COSINE, params=(("eps", 0.0),)), "near-zero norm")
    with pytest.raises(LabError, match="not available|CUDA"):
        perturbation_sweep(replace(COSINE, device="cuda"), "input norm")


def test_metrics_and_memory_estimate(norm_sweep):
    assert set(METRICS) == {"max abs error", "max relative error", "cosine to reference"}
    assert norm_sweep.metric("cosine to reference") is norm_sweep.cosine
    with pytest.raises(LabError):
        norm_sweep.metric("speed")
    assert set(SWEEPS) == {"input norm", "noise scale", "eps", "near-zero norm", "angle", "dtype"}
    small, large = sweep_bytes(COSINE), sweep_bytes(replace(COSINE, shape=(600, 500)))
    assert 0 < small < large and large == pytest.approx(small * 10_000)
