"""The precision verdict (lib.engine.precision): low precision judged against the reference in the
same dtype, both against float64 from the same values; the tolerances a test can paste, checked on
fresh draws."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gradient_lab.app import views
from gradient_lab.app.case import Case
from gradient_lab.app.family import get_family
from gradient_lab.engine import precision as P
from gradient_lab.engine.evaluate import backward_products
from gradient_lab.engine.pipeline import exact_problem, wrong_inputs
from gradient_lab.explore.perturb import Perturbation
from gradient_lab.testing import check_gradients

sys.path.insert(0, str(Path(__file__).parents[1] / "specimens" / "modules"))
import precision_functions as zoo  # noqa: E402

LOW = ("float32", "bfloat16", "float16")
GALLERY = ("cosine", "logsumexp", "softmax", "normalize", "softplus", "layernorm", "gelu")
ROW_NORMS = {"defaults": Perturbation(), "row norm 1e3": Perturbation(norm1=1e3, norm2=1e3)}


@pytest.fixture(autouse=True)
def declared():
    zoo.register_all()


def report_of(family: str, formula: str, dtype: str, shape=(8, 16), perturbation: Perturbation | None = None, seed: int = 0,
              **options):
    perturbation = perturbation or Perturbation()
    params = tuple(sorted(get_family(family).params.items()))
    case = Case(family=family, formulas=(formula,), dtype=dtype, shape=shape, perturbation=perturbation, seed=seed, params=params,
                **options)
    return case, views.compare_case(case, formula)


# ---- the measures ------------------------------------------------------------------------------------


def test_the_largest_exceedance_is_the_least_atol_that_assert_close_passes_with():
    values, truth = np.array([1.0, 2.1, 0.0]), np.array([1.0, 2.0, 0.05])
    atol = float(P.exceedances(values, truth, rtol=0.01).max())
    assert atol == pytest.approx(0.08)
    torch.testing.assert_close(torch.tensor(values), torch.tensor(truth), atol=atol * (1 + 1e-9), rtol=0.01)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(torch.tensor(values), torch.tensor(truth), atol=atol * 0.99, rtol=0.01)
    assert P.exceedances(np.array([np.inf]), np.array([1.0]), 0.01).max() == math.inf


def test_ulps_count_units_in_the_last_place_of_the_dtype_at_the_truth():
    truth = np.array([1.0, 1.0, 3.0, 0.0])
    values = np.array([1.0 + 2**-7, 1.0 - 2**-7, 3.0 + 2**-6, 2**-133])
    assert P.ulps(values, truth, torch.bfloat16).tolist() == [1.0, 1.0, 1.0, 1.0]  # at 0: the smallest subnormal's ulp


def test_error_stats_give_rmse_snr_and_the_mismatch_at_given_tolerances():
    truth = np.array([3.0, 4.0])
    stats = P.error_stats(np.array([3.0, 4.5]), truth, torch.float16, tolerance=(0.1, 0.0))
    assert stats.max_error == 0.5 and stats.rel_rmse == pytest.approx(0.1)
    assert stats.snr_db == pytest.approx(20.0) and stats.mismatch == 0.5 and stats.non_finite == 0
    assert stats.ulp_counts.sum() == 2
    broken = P.error_stats(np.array([np.nan, 4.0]), truth, torch.float16)
    assert broken.max_error == math.inf and broken.non_finite == 1 and broken.snr_db == -math.inf


def test_suggested_atol_extrapolates_beyond_the_draws_and_holds_on_fresh_ones():
    rng = np.random.default_rng(0)
    draws = [rng.standard_exponential(64) * 1e-3 for _ in range(128)]
    suggested = P.suggest_tolerance(draws, torch.bfloat16, rate=1e-3)
    seen = max(d.max() for d in draws)
    assert suggested.usable and suggested.atol >= P.MARGIN * seen and suggested.failures == 0 and suggested.draws == 128
    fresh = np.array([rng.standard_exponential(64).max() * 1e-3 for _ in range(20000)])
    assert (fresh > suggested.atol).mean() <= 1e-3
    broken = P.suggest_tolerance([np.array([np.inf, 0.0])] + draws, torch.bfloat16)
    assert not broken.usable and broken.non_finite == 1


# ---- no false alarm: correct Functions pass in every low dtype -----------------------------------------------


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("where", ROW_NORMS)
@pytest.mark.parametrize("family", GALLERY)
def test_every_correct_gallery_formula_passes_in_low_precision(family, where, dtype):
    for formula, spec in get_family(family).formulas.items():
        if spec.correct:
            _, report = report_of(family, formula, dtype, perturbation=ROW_NORMS[where])
            assert report.verdict.passed, report.verdict.summary
            assert report.precision is not None and report.precision.passed and report.dtype == dtype
            assert "largest error is" in report.verdict.summary and "ULP" in report.verdict.summary


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("family", [f.name for f in zoo.FAMILIES])
def test_correct_low_precision_functions_pass_and_poor_ones_fail_with_their_ratio(family, dtype):
    poor, poor_in, shape = zoo.POOR[family]
    for formula, spec in get_family(family).formulas.items():
        _, report = report_of(family, formula, dtype, shape=shape)
        precision = report.precision
        if spec.correct or dtype not in poor_in:
            assert report.verdict.passed, report.verdict.summary
            continue
        assert not report.verdict.passed and not precision.passed
        worst = precision.worst
        assert worst.ratio > P.RATIO or worst.first_non_finite >= 0
        assert f"in {dtype}, the gradient of x" in report.verdict.summary
        _, exact = report_of(family, formula, "float64", shape=shape)
        assert exact.verdict.passed and exact.precision is None  # right in float64: only the precision is poor


def test_a_poor_backward_is_named_with_its_ratio_and_worst_element():
    _, report = report_of("precision standardize", "one-pass variance", "bfloat16")
    precision = report.precision
    (x,) = precision.results
    assert not x.passed and x.ratio > 10 and x.formula.rel_rmse > x.allowed_rmse
    assert f"worst at {x.element(x.worst)}" in report.verdict.summary and f"{x.ratio:.2g}×" in report.verdict.summary
    assert x.formula.snr_db < x.baseline.snr_db - 20  # it loses more than three bits


def test_an_overflow_in_the_dtype_only_is_named_at_its_first_element():
    _, report = report_of("precision softmax", "unshifted exp", "float16")
    (x,) = report.precision.results
    assert x.first_non_finite >= 0 and x.formula.non_finite > 0 and x.baseline.non_finite == 0
    assert f"not finite at {x.formula.non_finite:,} element" in report.verdict.summary and x.element(x.first_non_finite) in report.verdict.summary


def test_the_float64_verdict_still_catches_a_wrong_backward_in_low_precision():
    _, report = report_of("cosine", "tutorial", "bfloat16")
    assert not report.verdict.passed and report.diagnosis is not None and report.diagnosis.findings
    assert report.precision is not None and not report.precision.passed


def test_the_truth_is_float64_from_the_dtypes_own_values_and_the_maps_draw_the_dtype():
    case, report = report_of("softmax", "corrected", "bfloat16")
    analytic = report.inputs[0].gradients["analytic"]
    assert np.array_equal(torch.from_numpy(analytic).bfloat16().double().numpy(), analytic)  # the formula's own bf16 values
    low = views._problem(case, "corrected")
    exact = exact_problem(low)
    assert exact.inputs[0].dtype == torch.float64 and torch.equal(exact.inputs[0], low.inputs[0].double())
    upstream = torch.from_numpy(report.inputs[0].gradients["reference"])  # the maps' truth: float64 through the reference
    assert upstream.dtype == torch.float64 and not np.array_equal(torch.from_numpy(report.inputs[0].gradients["reference"]).bfloat16()
                                                                 .double().numpy(), report.inputs[0].gradients["reference"])


def test_second_order_and_conditions_run_in_float64_and_raise_no_false_alarm():
    _, report = report_of("softmax", "corrected", "float16", perturbation=ROW_NORMS["row norm 1e3"])
    assert report.second_order is not None and not report.second_order.failed
    assert report.conditions is not None and not report.conditions.failed


# ---- the tolerances a user can paste, tried on fresh seeds -------------------------------------------------


@pytest.mark.parametrize("family, formula, dtype", [("softmax", "corrected", "bfloat16"), ("cosine", "corrected", "float16"),
                                                    ("precision standardize", "two-pass", "bfloat16"),
                                                    ("layernorm", "corrected", "float32")])
def test_suggested_tolerances_fail_no_more_often_than_they_say_on_fresh_seeds(family, formula, dtype):
    case, report = report_of(family, formula, dtype)
    tolerances = {r.name: r.tolerance for r in report.precision.results}
    assert all(t.usable and t.failures == 0 and t.rate == P.FLAKE_RATE for t in tolerances.values())
    fam = get_family(family)
    failures = 0
    for seed in range(50_000, 50_150):  # far from the draws behind the fit
        given = Case(**{**case.__dict__, "seed": seed}).inputs()
        low, exact = fam.problem(formula, given, case.param_values()), fam.problem(formula, P.upcast(given), case.param_values())
        with torch.no_grad():
            out = low.function(*low.inputs)
        g = torch.randn(tuple(out.shape), generator=torch.Generator().manual_seed(seed + 7), dtype=torch.float64).to(out)
        mine = backward_products(low.function, low.inputs, None, g)
        truth = backward_products(exact.reference, exact.inputs, None, g.double())
        theirs = backward_products(low.reference, low.inputs, None, g)
        for name, a, t, b in zip(low.names, mine, truth, theirs):
            t_ = tolerances[name]
            for expected in (t, b):  # against the float64 truth, or against the reference in the dtype
                try:
                    torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(expected), atol=t_.atol, rtol=t_.rtol)
                except AssertionError:
                    failures += 1
    assert failures == 0  # 150 seeds × inputs × 2 comparisons; the stated rate is 1 in 10,000


# ---- without a reference, raising, dtype-only kernels ----------------------------------------------------------


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class _RaisesInHalf(_Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if x.dtype == torch.float16:
            raise RuntimeError("no float16 kernel")
        return 2 * x * g


class _OnlyBfloat16(_Square):
    @staticmethod
    def forward(x):
        if x.dtype != torch.bfloat16:
            raise TypeError("this kernel takes bfloat16 only")
        return x * x


def _x(dtype):
    return torch.randn(6, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)


def test_without_a_reference_the_truth_rounded_is_the_baseline():
    report = check_gradients(_Square.apply, _x(torch.bfloat16))
    assert report.verdict.passed and report.precision.baseline_kind == "rounding"
    (x,) = report.precision.results
    assert x.baseline_kind == "rounding" and x.baseline.max_ulp <= 0.5 and "truth rounded" in report.verdict.summary


def test_a_backward_that_raises_only_in_the_dtype_fails_as_the_formulas():
    report = check_gradients(_RaisesInHalf.apply, _x(torch.float16), reference=lambda x: x * x)
    assert not report.verdict.passed and "no float16 kernel" in report.precision.failure
    assert "the formula raised" in report.verdict.summary


def test_a_kernel_that_takes_only_its_dtype_is_judged_by_precision_alone():
    report = check_gradients(_OnlyBfloat16.apply, _x(torch.bfloat16), reference=lambda x: x * x)
    assert report.verdict.passed and report.precision.passed
    assert "does not run in float64" in report.verdict.summary


def test_wrong_inputs_in_low_precision_follow_the_precision_rule():
    case = Case(family="softmax", formulas=("no-subtract", "corrected"), dtype="bfloat16")
    problems = [views._problem(case, f) for f in case.formulas]
    wrong = wrong_inputs(problems)
    assert wrong == {"no-subtract": ("x",), "corrected": ()}


def test_float64_keeps_its_verdict_and_has_no_precision():
    _, report = report_of("softmax", "corrected", "float64")
    assert report.precision is None and report.verdict.passed and "ULP" not in report.verdict.summary


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the precision verdict on the GPU")
def test_on_cuda_the_formula_runs_on_the_gpu_and_the_truth_in_float64_there():
    _, report = report_of("softmax", "corrected", "bfloat16", device="cuda")
    assert report.verdict.passed and report.precision.device.startswith("cuda") and report.precision.truth_device.startswith("cuda")
    assert "on cuda" in report.precision.describe()
