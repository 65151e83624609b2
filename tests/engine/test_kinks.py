"""Kinks: at an element where a function is not differentiable (ReLU and |x| at 0, a tie in max,
a clamp at its bound), a correct backward's subgradient passes, judged against the interval of
the one-sided derivatives, and the element is named; gradcheck fails the same Functions there.
A backward outside that interval still fails."""

import pytest
import torch

from gradient_lab.engine.pipeline import check, compare_gradients
from gradient_lab.app.family import Family, Formula
from tests.specimens import zoo
from tests.specimens.conditions import SortByNumpy, SortMatchesValues


class ReluTwiceAtZero(zoo.Relu):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.where(x == 0, torch.full_like(x, 2.0), (x > 0).to(g))  # 2 at the kink: no subgradient


def family(function, reference, with_reference=True) -> Family:
    return Family(name="kink", title="kink", description="", input_names=("x",), reference=reference if with_reference else None,
                  formulas={"f": Formula("f", function.apply, "", "", True)}, build_inputs=lambda *a, **k: None, loss=lambda y: y.sum())


def on_kinks(kinks: tuple[float, ...], shape=(4, 5)) -> torch.Tensor:
    """Standard normals with every other element moved exactly onto a kink."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    flat = x.reshape(-1)
    flat[::2] = torch.tensor(kinks, dtype=torch.float64).repeat(flat[::2].numel() // len(kinks) + 1)[: flat[::2].numel()]
    return x


def tied_rows(shape=(4, 5)) -> torch.Tensor:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x[:, 1] = x.max(1).values  # a tie for every row's maximum
    return x


def three_way_ties(shape=(4, 5)) -> torch.Tensor:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x[:, 1:4] = x[:, :1]  # the first four of each row tie
    return x


CASES = {  # name -> (Function, reference, inputs, whether gradcheck's slow mode fails it there)
    "relu at 0": (zoo.Relu, torch.relu, lambda: on_kinks((0.0,)), True),
    "abs at 0": (zoo.Abs, torch.abs, lambda: on_kinks((0.0,)), False),  # sign(0) = 0 is the central difference too
    "clamp at its bounds": (zoo.Clamp, lambda x: x.clamp(-1, 1), lambda: on_kinks((-1.0, 1.0)), True),
    "max with ties": (zoo.RowMax, lambda x: x.max(1).values, tied_rows, True),
    # ties broken the other way round from torch.sort's: each element may take any tied place's gradient
    "sort with three-way ties": (SortByNumpy, lambda x: x.sort(-1).values, three_way_ties, True),
}


@pytest.mark.parametrize("with_reference", [True, False], ids=["reference", "no reference"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_correct_backward_on_kinks_passes_and_the_kinks_are_named(name, with_reference):
    function, reference, inputs, gradcheck_fails = CASES[name]
    x = inputs()
    report = compare_gradients(family(function, reference, with_reference), "f", (x,))
    assert report.verdict.passed, report.verdict.summary
    assert report.jacobian.coverage.kinks and "not differentiable here" in report.verdict.summary
    passed = torch.autograd.gradcheck(function.apply, (x.clone().requires_grad_(),), fast_mode=False, raise_exception=False)
    assert passed != gradcheck_fails  # where gradcheck raises a false alarm, the verdict does not


def test_a_backward_outside_the_one_sided_derivatives_fails_at_a_kink():
    report = compare_gradients(family(ReluTwiceAtZero, torch.relu), "f", (on_kinks((0.0,)),))
    assert not report.verdict.passed


def test_tied_elements_that_all_take_one_places_gradient_fail_jointly():
    # each tied element's gradient is a valid member alone; together the group's shares do not add up
    report = compare_gradients(family(SortMatchesValues, lambda x: x.sort(-1).values), "f", (three_way_ties(),))
    assert not report.verdict.passed


def test_a_wrong_backward_away_from_kinks_still_fails():
    specimen = next(s for s in zoo.WRONG if s.name == "region")
    report = compare_gradients(specimen.family(False), "f", specimen.inputs())
    assert not report.verdict.passed and not report.jacobian.coverage.kinks


@pytest.mark.parametrize("name", ["relu at 0", "clamp at its bounds"])
def test_the_kinks_are_the_elements_placed_on_them_and_the_maps_outline_them(name):
    from gradient_lab.present.figures.check import error_heatmap, gradient_heatmaps

    function, reference, inputs, _ = CASES[name]
    x = inputs()
    report = compare_gradients(family(function, reference), "f", (x,))
    comparison = report.inputs[0]
    assert comparison.kinks.tolist() == list(range(0, x.numel(), 2))  # every other element was moved onto a kink
    for figure, panels in ((gradient_heatmaps(comparison), 3), (error_heatmap(comparison), 1)):
        marked = [t for t in figure.data if t.type == "scatter" and t.name.startswith("not differentiable here")]
        assert len(marked) == panels
        cells = sorted(zip(marked[0].y, marked[0].x))
        assert cells == sorted((k // x.shape[1], k % x.shape[1]) for k in comparison.kinks)
        assert "x[0, 0]" in marked[0].text


def test_no_kinks_are_marked_on_a_smooth_function():
    from gradient_lab.present.figures.check import gradient_heatmaps

    report = compare_gradients(family(zoo.Relu, torch.relu), "f", (torch.randn(4, 5, dtype=torch.float64) + 0.5,))
    assert report.inputs[0].kinks.size == 0
    assert not [t for t in gradient_heatmaps(report.inputs[0]).data if t.type == "scatter"]


@pytest.mark.parametrize("name, with_reference", [("clamp at its bounds", True), ("max with ties", False)])
def test_without_the_second_look_a_kink_is_not_forgiven(name, with_reference):
    # ``looks=0`` (a condition's check beside a failing plain verdict): an entry passes outright or fails
    function, reference, inputs, _ = CASES[name]
    problem = family(function, reference, with_reference).problem("f", (inputs(),), {})
    assert check(problem, order=1, conditions="none").verdict.passed
    assert not check(problem, order=1, conditions="none", looks=0).verdict.passed
