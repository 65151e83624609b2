"""The whole-Jacobian verdict: every wrong backward of the zoo fails, every right one passes, and
the verdict agrees with gradcheck's slow mode (float64) on each, with and without a reference;
the second order agrees with gradgradcheck where the first order is right, and sees what
gradgradcheck cannot (a backward consistent with itself but wrong)."""

import numpy as np
import pytest
import torch

from gradient_lab.engine.pipeline import compare_gradients
from gradient_lab.app.family import get_family
from gradient_lab.engine.judge import Coverage, compare_entries, row_colors
from gradient_lab.engine.tolerances import default_tolerances
from tests.specimens import zoo

ALL = zoo.WRONG + zoo.RIGHT


def gradcheck(specimen, second: bool = False) -> bool:
    xs = tuple(x.clone().requires_grad_() for x in specimen.inputs())
    check = torch.autograd.gradgradcheck if second else torch.autograd.gradcheck
    try:
        return check(specimen.function.apply, xs, fast_mode=False, raise_exception=False)
    except RuntimeError:  # gradgradcheck raises where the backward is not differentiable
        return False


@pytest.mark.parametrize("with_reference", [True, False], ids=["reference", "no reference"])
@pytest.mark.parametrize("specimen", ALL, ids=[s.name for s in ALL])
def test_the_first_order_verdict_agrees_with_gradcheck_slow_mode(specimen, with_reference):
    family = specimen.family(with_reference)
    report = compare_gradients(family, "f", specimen.inputs())
    assert report.verdict.passed == (not specimen.wrong_first), report.verdict.summary
    assert report.verdict.passed == gradcheck(specimen) or specimen.gradcheck_blind
    assert "Jacobian entries" in report.verdict.summary  # every verdict says what it covered


@pytest.mark.parametrize("specimen", ALL, ids=[s.name for s in ALL])
def test_the_second_order_verdict_sees_every_wrong_double_backward(specimen):
    report = compare_gradients(specimen.family(True), "f", specimen.inputs())
    assert report.second_order.passed == (not specimen.wrong_second), report.second_order.summary
    if not specimen.wrong_first and not specimen.gradcheck_blind:  # where first order is right, gradgradcheck is a fair judge
        assert report.second_order.passed == gradcheck(specimen, second=True)


def test_a_backward_that_detaches_is_said_to_be_not_differentiable():
    specimen = next(s for s in zoo.WRONG if s.name == "detached backward")
    report = compare_gradients(specimen.family(True), "f", specimen.inputs())
    assert report.verdict.passed
    assert report.second_order.outcome == "not differentiable"
    assert "not differentiable" in report.second_order.summary


def test_the_tutorial_is_consistent_with_itself_yet_fails_the_second_order():
    family = get_family("cosine")
    inputs = family.build_inputs((4, 6), seed=0)
    report = compare_gradients(family, "norm-fixed", inputs)
    assert report.second_order.outcome == "fail"
    assert "gradgradcheck would pass it" in report.second_order.summary
    xs = tuple(x.clone().requires_grad_() for x in inputs)
    function = family.formula("norm-fixed").function
    assert torch.autograd.gradgradcheck(lambda a, b: function(a, b, dim=1, eps=1e-8), xs, raise_exception=False)


def test_every_grad_output_bug_of_the_issue_fails_for_a_users_module():
    """The three cases the issue found passing: a module with no reference, the sum loss."""
    for name in ("ignores grad_output", "grad_output mean", "rows rolled"):
        specimen = next(s for s in zoo.WRONG if s.name == name)
        report = compare_gradients(specimen.family(with_reference=False), "f", specimen.inputs())
        assert not report.verdict.passed, name
        assert specimen.diagnosis in [f.kind for f in report.diagnosis.findings], (name, report.verdict.summary)


def test_coverage_is_said_in_numbers_for_cosine():
    family = get_family("cosine")
    report = compare_gradients(family, "corrected", family.build_inputs((64, 128), seed=0))
    coverage = report.jacobian.coverage
    assert coverage.entries == 2 * 64 * 64 * 128
    assert coverage.structural == 2 * 64 * 128 and coverage.compared == coverage.structural
    assert coverage.backward_calls == 1  # all 64 outputs share no input element: one call
    assert report.verdict.summary.startswith("passes: all 1,048,576 Jacobian entries: the 16,384 structurally nonzero ones one by one, "
                                             "by 1 backward call and ")
    assert "the other 1,032,192 by 2 random probes" in report.verdict.summary


def test_rows_sharing_no_input_share_a_colour():
    # rows 0 and 1 share column 0 of input 1; row 2 is alone; input 2 links rows 1 and 2
    patterns = [(np.array([0, 1, 2]), np.array([0, 0, 1])), (np.array([1, 2]), np.array([0, 0]))]
    colors = row_colors(patterns, [2, 1], 3)
    assert colors[0] != colors[1] and colors[1] != colors[2]


def test_an_entry_is_judged_against_every_finite_truth_and_left_out_only_without_one():
    tol = default_tolerances(torch.float64)
    analytic = np.array([1.0, 1.0, np.nan, np.nan, 2.0])
    reference = np.array([1.0, np.nan, np.nan, 1.0, np.nan])
    numerical = np.array([1.0, 1.5, 0.5, 1.0, np.nan])
    judgement = compare_entries(analytic, {"reference": reference, "numerical": numerical}, tol)
    assert list(judgement.excess > 0) == [False, True, False, True, False]
    assert list(judgement.left_out) == [False, False, True, False, True]  # agrees with PyTorch's NaN; no truth at all
    assert judgement.failed and judgement.against in ("reference", "numerical")


def test_a_coverage_with_nothing_compared_gives_no_verdict():
    empty = Coverage(100, 10, 0, 10, ("∂out[0] / ∂x[0]",), 1, 4, 2, 0, "pattern")
    assert empty.empty and "0 of the 10" in empty.describe() and "left out" in empty.describe()


def test_a_check_cut_short_by_the_work_limit_says_so_as_coverage():
    from gradient_lab.engine.judge import check_jacobian
    from gradient_lab.engine.planning import plan_differences

    family = get_family("softmax")
    (x,) = family.build_inputs((4, 8), seed=0)
    run = lambda x: family.run("corrected", (x,))  # noqa: E731
    reference = lambda x: family.run(None, (x,))  # noqa: E731
    tolerances = default_tolerances(torch.float64)
    plans = plan_differences(run, reference, (x,), tolerances.step)
    verdict = check_jacobian(run, reference, (x,), ("x",), plans, tolerances, work_limit=10)
    assert verdict.coverage.partial and verdict.coverage.compared == 0
    assert "by 2 random probes only" in verdict.summary and "work limit" in verdict.summary
    wrong = check_jacobian(lambda x: family.run("no-subtract", (x,)), reference, (x,), ("x",), plans, tolerances, work_limit=10)
    assert wrong.passed == gradcheck_passes(lambda x: family.run("no-subtract", (x,)), x)


def gradcheck_passes(function, x) -> bool:
    return torch.autograd.gradcheck(function, (x.clone().requires_grad_(),), fast_mode=False, raise_exception=False)


def test_dense_blocks_are_checked_entry_by_entry_in_one_call_per_position():
    family = get_family("softmax")
    report = compare_gradients(family, "corrected", family.build_inputs((8, 64), seed=0))
    coverage = report.jacobian.coverage
    assert coverage.structural == 8 * 64 * 64 and coverage.backward_calls == 64
    assert report.inputs[0].plan.n_groups == 64 and report.verdict.passed


def test_a_backward_not_linear_in_grad_output_fails_though_gradcheck_passes_it():
    specimen = next(s for s in zoo.WRONG if s.name == "grad_output abs")
    assert gradcheck(specimen)  # its upstreams are unit vectors, where |g| = g
    report = compare_gradients(specimen.family(with_reference=False), "f", specimen.inputs())
    assert not report.verdict.passed and "not linear in grad_output" in report.verdict.summary


def test_a_small_added_term_is_caught_by_the_zero_upstream():
    specimen = next(s for s in zoo.WRONG if s.name == "added constant")
    report = compare_gradients(specimen.family(True), "f", specimen.inputs())
    assert "for a zero upstream gradient" in report.verdict.summary and "not multiplied by grad_output" in report.verdict.summary


# ---- which truth (issue #24) -----------------------------------------------------------------------

from tests.specimens.corpus import cases, functions as corpus  # noqa: E402

X48 = torch.randn(4, 8, generator=torch.Generator().manual_seed(5), dtype=torch.float64)


def test_a_reference_whose_gradient_is_not_forwards_derivative_is_no_truth_and_a_backward_that_follows_it_is_told_to_declare_it():
    from gradient_lab.testing import check_gradients

    report = check_gradients(corpus.StraightThroughRound, X48, reference=cases.straight_through_round)
    coverage = report.jacobian.coverage
    assert coverage.unreproduced == ("x",) and coverage.truths == ("numerical",) and not report.verdict.passed
    assert report.jacobian.follows_foreign == ("x",) and report.diagnosis.findings[0].kind == "surrogate"
    assert "declare" in report.diagnosis.findings[0].words and "surrogate=" in report.diagnosis.findings[0].words


def test_a_backward_on_a_locally_constant_forward_names_the_entry_where_the_truth_is_zero_and_not_mixing():
    from gradient_lab.testing import check_gradients

    report = check_gradients(corpus.StraightThroughRound, X48)  # no reference: finite differences, all 0
    off = report.jacobian.off_pattern
    assert report.jacobian.coverage.structural == 0 and report.jacobian.linear
    assert off is not None and off.row == off.col and off.value == pytest.approx(1.0)  # ∂round(x)ᵢ/∂xᵢ given as 1
    assert [f.kind for f in report.diagnosis.findings] == ["surrogate"]
    assert "every one zero in the truth" in report.verdict.coverage


def test_a_backward_that_is_not_linear_in_grad_output_is_said_so():
    from gradient_lab.testing import check_gradients

    specimen = next(s for s in zoo.WRONG if s.name == "grad_output abs")
    report = check_gradients(specimen.function, specimen.inputs(), reference=specimen.reference)
    assert not report.jacobian.linear and report.jacobian.off_pattern is None
    assert "b(u₁ + u₂) ≠ b(u₁) + b(u₂)" in report.verdict.finding


def test_an_exact_reference_that_agrees_with_the_formula_is_not_outvoted_by_differences_that_disagree_with_both():
    tolerances = default_tolerances(torch.float64)
    analytic, reference = np.array([5.9e7, 1.0]), np.array([5.9e7, 1.0])
    numerical = np.array([5.8e5, 1.0])  # a step far larger than the element's own scale
    assert not compare_entries(analytic, {"reference": reference, "numerical": numerical}, tolerances).failed
    wrong = np.array([2.4, 1.0])  # a formula the reference does not agree with still fails, whatever the differences say
    assert compare_entries(wrong, {"reference": reference, "numerical": numerical}, tolerances).against == "reference"


@pytest.mark.parametrize("factor", [0.1, 1.0, 10.0])
def test_the_corrected_cosine_passes_with_rows_near_zero_and_the_tutorial_still_fails(factor):
    from gradient_lab.app import views
    from gradient_lab.app.case import Case
    from gradient_lab.explore.perturb import Perturbation

    case = Case(formulas=("tutorial", "corrected"), perturbation=Perturbation(near_zero_rows=2, near_zero_factor=factor))
    assert views.gradient_report(case, "corrected").verdict.passed
    assert not views.gradient_report(case, "tutorial").verdict.passed


@pytest.mark.parametrize("norm", [1e-6, 1e-5])
def test_a_reference_is_not_judged_by_differences_too_coarse_for_its_inputs(norm):
    # rows of norm 1e-6 differenced at a step of 1e-6: the differences straddle the function's own scale
    from gradient_lab.app import views
    from gradient_lab.app.case import Case
    from gradient_lab.engine.judge import coarse
    from gradient_lab.explore.perturb import Perturbation

    case = Case(formulas=("norm-fixed", "corrected"), perturbation=Perturbation(norm1=norm, norm2=norm))
    right, flipped = views.gradient_report(case, "corrected"), views.gradient_report(case, "norm-fixed")
    assert right.verdict.passed and right.jacobian.coverage.unreproduced == ()
    assert not flipped.verdict.passed and flipped.verdict.found.against == "reference"
    assert coarse(torch.full((4,), 1e-7), 1e-6) and not coarse(torch.ones(4), 1e-6)


def test_a_zero_dimensional_input_is_judged_not_crashed_on():
    # PyTorch's OpInfo samples of xlogy and __rpow__ take a 0-d tensor beside a vector
    from gradient_lab.testing import check_gradients

    tolerances = default_tolerances(torch.float64)
    judged = compare_entries(np.array(np.nan), {"reference": np.array(1.0), "numerical": np.array(1.0)}, tolerances)
    assert judged.excess.shape == () and judged.failed
    y = torch.randn(3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    xlogy = lambda a, b: torch.xlogy(a, b.abs())  # noqa: E731
    report = check_gradients(xlogy, (torch.tensor(0.0, dtype=torch.float64), y), reference=xlogy, conditions="none")
    assert report.verdict.passed and report.failure is None


def test_an_empty_jacobian_passes_vacuously_as_gradcheck_says():
    from gradient_lab.testing import check_gradients

    report = check_gradients(lambda x: x.roll(1, 0), torch.zeros(0, 3, dtype=torch.float64), conditions="none", training=0)
    assert report.verdict.outcome == "pass" and report.jacobian.coverage.entries == 0
    assert torch.autograd.gradcheck(lambda x: x.roll(1, 0), (torch.zeros(0, 3, dtype=torch.float64, requires_grad=True),))


def test_an_input_whose_whole_jacobian_is_rounding_is_not_judged_at_its_own_tiny_scale():
    # y = (a, b·1e-17 + rounding): b's whole Jacobian is 1e-17, where a formula's exact 0 and the differences' rounding differ
    class TinyCoupling(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return torch.cat([a * a, (a.exp() * 1e-17 + b * 1e-17)])

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            n = a.numel()
            return 2 * a * g[:n] + a.exp() * 1e-17 * g[n:], g[n:] * 0.0  # b's true 1e-17 entries written as 0

    from gradient_lab.testing import check_gradients

    a, b = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    report = check_gradients(TinyCoupling, (a, b), conditions="none", training=0)
    assert report.verdict.passed, report.verdict.summary
    wrong = check_gradients(lambda a, b: TinyCoupling.apply(a, b) * torch.cat([torch.ones(4), 1e17 * torch.ones(4)]).double(), (a, b),
                            conditions="none", training=0)
    assert not wrong.verdict.passed  # the same zero, where b's entries are 1, is a failure


class RowNormalize(torch.autograd.Function):
    """x / ‖x‖ along the last dim, right."""

    @staticmethod
    def forward(ctx, x):
        y = x / x.norm(dim=-1, keepdim=True)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return (g - y * (g * y).sum(-1, keepdim=True)) / x.norm(dim=-1, keepdim=True)


class RowNormalizeNoProjection(RowNormalize):
    @staticmethod
    def backward(ctx, g):
        x, _ = ctx.saved_tensors
        return g / x.norm(dim=-1, keepdim=True)  # the projection term forgotten


def _tiny_rows() -> torch.Tensor:
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x[2:4] *= 1e-8 / x[2:4].norm(dim=-1, keepdim=True)  # two rows of norm 1e-8: a step of 1e-6 spans the whole function there
    return x


def test_finite_differences_at_each_elements_own_scale_judge_rows_far_smaller_than_the_step():
    from gradient_lab.testing import check_gradients

    right = check_gradients(RowNormalize, _tiny_rows(), conditions="none", training=0)  # no reference: differences are the truth
    assert right.verdict.passed, right.verdict.summary
    wrong = check_gradients(RowNormalizeNoProjection, _tiny_rows(), conditions="none", training=0)
    assert not wrong.verdict.passed
    found = wrong.verdict.found
    assert found.element // 8 in (2, 3)  # worst in a tiny row, judged there
    assert found.truth == pytest.approx(found.formula - _projection_term(found), rel=1e-3)  # the truth shown is the element's own


def _projection_term(found) -> float:
    x = _tiny_rows()
    row, col = divmod(found.element, x.shape[1])
    out_row, out_col = (int(i) for i in found.output.removeprefix("out[").removesuffix("]").split(", "))
    y = x / x.norm(dim=-1, keepdim=True)
    return float(y[row, out_col] * y[row, col] / x[row].norm())
