"""The comparison engine: known answers, a broken toy found at its worst element, NaN reported."""

import math

import numpy as np
import pytest
import torch

from gradient_lab.app.case import Case
from gradient_lab.engine.report import PAIRS
from gradient_lab.app.views import compare_case
from gradient_lab.engine.pipeline import compare_gradients, default_tolerances
from gradient_lab.explore.step_sweep import step_sweep
from gradient_lab.app.family import get_family
from gradient_lab.engine.planning import CHECK_DIRECTIONS
from tests.specimens.toys import broken_square_family, dense_family, reaching_family

F64 = torch.float64
COSINE = get_family("cosine")


def unit_rows(xs):
    return tuple(x / x.norm(dim=1, keepdim=True) for x in xs)


def test_corrected_agrees_with_reference_and_finite_differences():
    report = compare_gradients(COSINE, "corrected", COSINE.build_inputs((16, 32), seed=3))
    assert report.verdict.passed, report.verdict.summary
    for c in report.inputs:
        assert c.errors[("analytic", "reference")].max_abs <= 1e-10
        assert c.errors[("analytic", "numerical")].max_abs <= 1e-7
        assert c.plan.colors is not None
    assert report.cosine == pytest.approx(1.0, abs=1e-12)
    assert report.forward_max_error <= 1e-15
    assert report.evaluations == 2 * (2 * 32 + 2 * CHECK_DIRECTIONS)
    assert report.loss == pytest.approx(float((1 - torch.nn.functional.cosine_similarity(*COSINE.build_inputs((16, 32), seed=3))).mean()))


def test_tutorial_is_exactly_flipped_on_unit_norm_inputs():
    report = compare_gradients(COSINE, "tutorial", unit_rows(COSINE.build_inputs((8, 5), seed=1)))
    assert report.cosine == pytest.approx(-1.0, abs=1e-12)
    assert not report.verdict.passed
    assert "by the formula's backward" in report.verdict.summary and "Jacobian entry" in report.verdict.summary
    c = report.input("x1")
    np.testing.assert_allclose(c.gradients["analytic"], -c.gradients["reference"], atol=1e-14)
    index, values = c.worst()
    assert values["analytic"] == pytest.approx(-values["reference"])
    assert values["numerical"] == pytest.approx(values["reference"], abs=1e-8)


def test_sign_fixed_tutorial_is_right_at_unit_norm_and_wrong_elsewhere():
    assert compare_gradients(COSINE, "sign-fixed", unit_rows(COSINE.build_inputs((8, 5)))).verdict.passed
    off = compare_gradients(COSINE, "sign-fixed", COSINE.build_inputs((8, 5)))
    assert not off.verdict.passed and 0 < off.cosine < 0.99


def test_broken_toy_is_flagged_at_its_broken_element():
    family = broken_square_family()
    report = compare_gradients(family, "broken", family.build_inputs((4, 5)))
    assert not report.verdict.passed
    assert "x[1, 2]" in report.verdict.summary  # flat index 7 of a 4x5 input
    c = report.input("x")
    for pair in (("analytic", "reference"), ("analytic", "numerical")):
        assert c.errors[pair].worst == (1, 2)
        assert c.errors[pair].max_abs == pytest.approx(1.0, abs=1e-6)
    assert c.errors[("reference", "numerical")].max_abs < 1e-8
    signed = c.errors[("analytic", "reference")].signed
    assert np.count_nonzero(np.abs(signed) > 1e-8) == 1


def test_dense_jacobian_gets_correct_maps_without_colouring():
    family = dense_family()
    report = compare_gradients(family, "scaled", family.build_inputs((3, 4)))
    assert report.verdict.passed, report.verdict.summary
    c = report.input("x")
    assert c.plan.n_groups == 12 and "dense" in c.plan.source  # the pattern is kept: it tells which elements meet
    assert report.evaluations == 2 * 12 + 2 * CHECK_DIRECTIONS
    assert c.errors[("analytic", "numerical")].max_abs < 1e-8
    assert set(c.jacobians) == {"analytic", "reference", "numerical"}
    np.testing.assert_allclose(c.jacobians["numerical"], c.jacobians["analytic"], atol=1e-8)


def test_family_without_reference_uses_finite_differences_as_reference():
    family = dense_family(with_reference=False)
    report = compare_gradients(family, "scaled", family.build_inputs((3, 4)))
    assert report.verdict.passed
    c = report.input("x")
    np.testing.assert_array_equal(c.gradients["reference"], c.gradients["numerical"])
    assert "against finite differences" in report.verdict.summary and "autograd" not in report.verdict.summary


def test_forward_reaching_beyond_the_reference_pattern_still_gives_right_numbers():
    family = reaching_family()
    report = compare_gradients(family, "reaching", family.build_inputs((3, 4)))
    c = report.input("x")
    assert c.errors[("analytic", "numerical")].max_abs < 1e-8
    assert report.forward_max_error > 0.01  # its forward is not the reference's: that is the finding, and the
    assert report.verdict.outcome == "fail" and report.verdict.forward and not report.verdict.finding  # backward is right for its own
    assert report.jacobian.coverage.truths == ("numerical",)


def test_error_maps_and_relative_errors():
    report = compare_gradients(COSINE, "tutorial", COSINE.build_inputs((4, 6)))
    c = report.input("x2")
    assert set(c.errors) == set(PAIRS)
    m = c.errors[("analytic", "reference")]
    np.testing.assert_array_equal(m.signed, c.gradients["analytic"] - c.gradients["reference"])
    assert m.max_abs == pytest.approx(np.abs(m.signed).max())
    assert m.max_rel >= m.relative[m.worst] > 0
    assert np.isfinite(m.relative).all()


def test_jacobians_only_for_small_inputs():
    small = compare_gradients(COSINE, "corrected", COSINE.build_inputs((3, 4)))
    jac = small.input("x1").jacobians
    assert jac["reference"].shape == (3, 12)
    np.testing.assert_allclose(jac["analytic"], jac["reference"], atol=1e-12)
    np.testing.assert_allclose(jac["numerical"], jac["reference"], atol=1e-8)
    big = compare_gradients(COSINE, "corrected", COSINE.build_inputs((3, 4)), jacobian_limit=35)
    assert big.input("x1").jacobians is None


def test_explicit_grad_output_is_used_for_all_three():
    xs = COSINE.build_inputs((5, 3))
    v = torch.arange(5, dtype=F64)
    report = compare_gradients(COSINE, "corrected", xs, grad_output=v)
    a, b = (x.clone().requires_grad_() for x in xs)
    (want,) = torch.autograd.grad(torch.nn.functional.cosine_similarity(a, b), a, v)
    np.testing.assert_allclose(report.input("x1").gradients["numerical"], want.numpy(), atol=1e-9)
    np.testing.assert_allclose(report.input("x1").gradients["analytic"], want.numpy(), atol=1e-14)


def test_tolerances_have_per_dtype_defaults_and_can_be_overridden():
    assert default_tolerances(F64).atol == 1e-5 and default_tolerances(F64).step == 1e-6
    assert default_tolerances(torch.float32).step == 1e-3
    assert default_tolerances(F64, atol=0.5, step=None).atol == 0.5
    xs = COSINE.build_inputs((6, 4), dtype=torch.float32)
    report = compare_gradients(COSINE, "corrected", xs)
    assert report.dtype == "float32" and report.verdict.passed, report.verdict.summary
    loose = compare_gradients(COSINE, "tutorial", COSINE.build_inputs((6, 4)), atol=100.0)
    assert loose.verdict.passed and loose.tolerances.atol == 100.0


def test_formula_raising_in_backward_is_reported_not_raised():
    report = compare_gradients(COSINE, "tutorial", COSINE.build_inputs((2, 3, 4)))
    assert (report.failure.stage, report.failure.kind) == ("backward", "RuntimeError")
    assert not report.verdict.passed and "raised" in report.verdict.summary
    assert np.isnan(report.input("x1").gradients["analytic"]).all()
    assert np.isfinite(report.input("x1").gradients["reference"]).all()


def test_nan_in_inputs_is_reported_with_where():
    x1, x2 = COSINE.build_inputs((4, 5))
    x1[2, 3] = math.nan
    x2[0, 1] = math.inf
    report = compare_gradients(COSINE, "corrected", (x1, x2))
    c1, c2 = report.input("x1"), report.input("x2")
    assert c1.non_finite["input"].nan == 1 and c1.non_finite["input"].first == ((2, 3),)
    assert c2.non_finite["input"].inf == 1
    assert any("x1[2, 3]" in note for note in report.notes)
    assert c1.non_finite["analytic"].nan >= 5  # the whole row
    assert np.isfinite(c1.gradients["analytic"][1]).all()  # other rows still compared
    assert c1.errors[("analytic", "reference")].worst is not None


def test_step_sweep_has_its_float64_minimum_between_1e_4_and_1e_8():
    sweep = step_sweep(COSINE, "corrected", COSINE.build_inputs((6, 8)))
    assert sweep.steps[0] == pytest.approx(1e-1) and sweep.steps[-1] == pytest.approx(1e-12)
    assert 1e-8 <= sweep.best_step("float64") <= 1e-4
    assert 1e-5 <= sweep.best_step("float32") <= 1e-1
    f64 = np.array(sweep.errors["float64"])
    assert f64[0] > 100 * f64.min() and f64[-1] > 100 * f64.min()  # truncation, then rounding
    assert min(sweep.errors["float32"]) > min(sweep.errors["float64"])


def test_compare_case_uses_the_case_settings():
    case = Case(shape=(3, 4, 5), params=(("dim", 2), ("eps", 1e-8)), seed=2)
    report = compare_case(case, "corrected")
    assert report.verdict.passed and report.input("x1").gradients["analytic"].shape == (3, 4, 5)


def test_one_nan_row_spoils_only_its_own_elements_and_keeps_the_pattern_sparse():
    x1, x2 = COSINE.build_inputs((40, 128), seed=1)
    x1[3, 5] = math.nan
    report = compare_gradients(COSINE, "corrected", (x1, x2))
    c = report.input("x1")
    # NaN once made the pattern look dense: 5,120 perturbations (minutes) instead of 128 groups
    assert c.plan.colors is not None and c.plan.n_groups == 128
    numerical = c.gradients["numerical"]
    assert np.isfinite(numerical[np.arange(40) != 3]).all()  # every other row keeps its gradient
    assert report.verdict.passed, report.verdict.summary  # no verdict where the truth is NaN itself


def test_step_sweep_of_nan_inputs_has_no_best_step_and_does_not_raise():
    from gradient_lab.present.figures.check import step_sweep_figure

    x1, x2 = COSINE.build_inputs((1, 4))
    x1[0, 0] = math.nan  # found by fuzzing: every error NaN
    sweep = step_sweep(COSINE, "tutorial", (x1, x2), steps=(1e-3, 1e-6))
    assert math.isnan(sweep.best_step("float64"))
    assert len(step_sweep_figure(sweep).data) == 2  # the two curves, no best-step stars


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_one_nan_does_not_flip_the_verdict_with_the_shape(rows):
    """(1, F) has a dense colouring and (R, F) a compressed one: the same rule for NaN on both."""
    x1, x2 = COSINE.build_inputs((rows, 16), seed=2)
    x1[0, 3] = math.nan
    report = compare_gradients(COSINE, "corrected", (x1, x2))
    assert report.verdict.outcome == ("no verdict" if rows == 1 else "pass"), report.verdict.summary
    assert np.isnan(report.input("x1").gradients["numerical"][0]).all()
    assert "left out because the truth is not finite" in report.verdict.summary


def test_all_outputs_not_finite_say_no_verdict_instead_of_raising():
    from gradient_lab.explore.perturb import Perturbation

    for kind in ("nan", "inf"):
        report = compare_case(Case(perturbation=Perturbation(inject=kind, inject_count=1000)), "corrected")
        assert report.verdict.outcome == "no verdict" and not report.verdict.passed
        assert "nothing could be compared" in report.verdict.summary


def test_the_taylor_test_falls_like_h_squared_for_a_right_backward_and_plateaus_for_a_wrong_one():
    inputs = COSINE.build_inputs((3, 5), seed=1)
    steps = (1e-1, 1e-2, 1e-3)
    right = step_sweep(COSINE, "corrected", inputs, steps=steps, dtypes=(torch.float64,))
    wrong = step_sweep(COSINE, "sign-fixed", inputs, steps=steps, dtypes=(torch.float64,))
    assert right.taylor[1] / right.taylor[0] == pytest.approx(1e-2, rel=0.5)  # h ten times smaller: error a hundred times
    assert right.plateau() < 1e-6 < 1e-2 < wrong.plateau()
    assert wrong.taylor[2] == pytest.approx(wrong.taylor[1], rel=0.05)  # flat at the size of the bug


# ---- Functions as they ship (issue #24) --------------------------------------------------------------

from gradient_lab.testing import check_gradients  # noqa: E402
from tests.specimens import shipped  # noqa: E402
from tests.specimens.conditions import ProductUnboundWhenAlone  # noqa: E402
from tests.specimens.corpus import cases, functions as corpus  # noqa: E402

X48 = torch.randn(4, 8, generator=torch.Generator().manual_seed(5), dtype=F64)


def test_a_forward_that_differs_from_its_reference_is_the_finding_and_its_backward_is_judged_by_its_own_forward():
    report = check_gradients(lambda x: shipped.SumIgnoresDim.apply(x, 1), X48, reference=lambda x: x.sum(1))
    assert report.verdict.outcome == "fail" and "shape (8,)" in report.verdict.forward and not report.verdict.finding
    assert report.jacobian.passed and report.jacobian.coverage.truths == ("numerical",)  # right for its own forward
    assert report.forward_max_error == math.inf  # shapes that differ


def test_a_backward_that_raises_only_when_one_input_needs_a_gradient_is_the_formulas_failure_with_its_condition():
    for shape in ((2, 3), (16, 32)):  # small enough for the drawn Jacobians, and not
        x = torch.randn(shape, dtype=F64)
        report = check_gradients(ProductUnboundWhenAlone, (x, x.flip(0)))
        failure = report.verdict.failure  # the plain verdict passes: the condition alone fails it, and is named
        assert report.failure is None and report.jacobian.passed
        assert failure.stage == "backward" and failure.kind == "UnboundLocalError"
        assert failure.when == "only x2 requires a gradient" and not report.verdict.passed
        assert report.verdict.condition == "only x2 requires a gradient" and report.verdict.summary.startswith("fails: when only x2")


def test_a_backward_that_edits_its_saved_tensor_fails_when_called_again_on_the_graph_and_never_crashes():
    report = check_gradients(corpus.ExpSavedEditedInPlace, X48)
    assert report.failure.stage == "backward" and "inplace" in report.failure.message
    assert "retain_graph" in report.failure.when and report.verdict.outcome == "fail"


@pytest.mark.parametrize("function, surrogate", [(corpus.StraightThroughRound, cases.straight_through_round),
                                                 (lambda x: corpus.GradientReversal.apply(x, cases.LAMBDA), cases.reversal)])
def test_a_declared_surrogate_is_the_only_truth_and_the_verdict_says_so(function, surrogate):
    report = check_gradients(function, X48, surrogate=surrogate)
    assert report.verdict.passed, report.verdict.summary
    assert report.jacobian.coverage.role == "surrogate" and report.jacobian.coverage.truths == ("reference",)
    assert "declared surrogate, the intended gradient, not the derivative of forward" in report.verdict.summary
    (c,) = report.inputs  # the maps still show where the intended gradient and forward's derivative part
    assert c.errors[("analytic", "numerical")].max_abs > 0.4
    wrong = check_gradients(function, X48, surrogate=lambda x: 2 * surrogate(x) - surrogate(x).detach())  # twice the intended
    assert not wrong.verdict.passed and "by the surrogate truth" in wrong.verdict.finding


def test_a_surrogates_forward_must_be_the_formulas():
    report = check_gradients(corpus.StraightThroughRound, X48, surrogate=lambda x: x)
    assert report.verdict.outcome == "fail" and report.verdict.forward.startswith("the formula's forward differs from the declared surrogate's")


def test_once_differentiable_is_not_differentiable_twice_by_design_and_order_1_leaves_the_second_order_unchecked():
    x = X48.clone()
    report = check_gradients(corpus.SoftplusOnce, x, reference=torch.nn.functional.softplus, order=2)
    assert report.verdict.passed and report.second_order.outcome == "by design" and report.passed(order=2)
    once = check_gradients(corpus.SoftplusOnce, x, reference=torch.nn.functional.softplus, order=1)
    assert once.second_order.outcome == "not checked" and "order=1" in once.second_order.summary


# ---- the first order shown early, the whole report made from it ------------------------------------------------


@pytest.mark.parametrize("formula", ["tutorial", "corrected"])
def test_the_first_report_names_the_stages_still_to_run_and_the_whole_report_goes_on_from_it(formula, monkeypatch):
    from gradient_lab.engine import pipeline

    problem = COSINE.problem(formula, COSINE.build_inputs((4, 6), seed=2), {})
    options = pipeline.CheckOptions(order=None)
    first = pipeline.first_order(problem, options)
    early = pipeline.first_report(first, options, family="cosine")
    assert early.stages == {} and set(early.pending) >= {"second_order", "conditions", "training"}
    fresh, calls = pipeline.first_order, []  # the conditions' changed problems have first orders of their own
    monkeypatch.setattr(pipeline, "first_order", lambda p, *a, **k: calls.append(p) or fresh(p, *a, **k))
    whole = pipeline.check(problem, options, family="cosine", first=first)
    assert problem not in calls
    assert whole.pending == () and set(early.pending) <= set(whole.stages)
    assert early.verdict.outcome == whole.verdict.outcome == ("pass" if formula == "corrected" else "fail")
    assert 0 < first.seconds == early.seconds < whole.seconds  # the whole report's time counts the first order's too
    assert early.verdict.found == whole.verdict.found
    kinds = lambda report: [f.kind for f in report.diagnosis.findings] if report.diagnosis is not None else []  # noqa: E731
    assert kinds(early) == kinds(whole)  # the card shown early tells the same story
