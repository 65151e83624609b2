"""Every registered family, checked the same way: each formula runs through compare_gradients on the
default inputs, and exactly the correct ones pass, save buggy formulas whose bug needs special inputs."""

from functools import partial

import pytest
import torch

from gradient_lab.app.case import Case
from gradient_lab.app.views import compare_case
from gradient_lab.engine.pipeline import compare_gradients
from gradient_lab.app.family import families
from gradient_lab.testing import assert_gradients_match

GALLERY = ("logsumexp", "softmax", "normalize", "softplus", "layernorm", "gelu")

# buggy formulas that are right on generic inputs, and what it takes to show their bug
RIGHT_ON_GENERIC_INPUTS = {
    ("cosine", "sign+norm-fixed"): "its backward reduces over dim=-1: wrong only on 3-D inputs with dim=1",
    ("logsumexp", "naive"): "exp(x) overflows only past x = 88.7 in float32, 709.8 in float64",
    ("normalize", "unclamped"): "the unclamped norm differs only on rows of norm 0 or below eps",
    ("softplus", "overflowing"): "exp(βx) overflows only past βx = 88.7 in float32, 709.8 in float64",
}


def test_the_gallery_is_registered():
    assert {"cosine", *GALLERY} <= set(families())
    for name in GALLERY:
        family = families()[name]
        assert family.name == name and family.title and family.description
        assert sum(f.correct for f in family.formulas.values()) == 1 and family.formulas["corrected"].correct
        assert sum(not f.correct for f in family.formulas.values()) >= 1


@pytest.mark.parametrize("name", list(families()))
def test_exactly_the_correct_formulas_pass_on_default_inputs(name):
    family = families()[name]
    inputs = family.build_inputs((4, 6))
    for formula_name, formula in family.formulas.items():
        if formula.correct:  # to second order, with the diagnosis in the message if it ever fails
            assert_gradients_match(partial(formula.function, **family.params), inputs, partial(family.reference, **family.params), order=2)
            continue
        report = compare_gradients(family, formula_name, inputs)
        assert report.failure is None, report.failure
        expected = formula.correct or (name, formula_name) in RIGHT_ON_GENERIC_INPUTS
        assert report.verdict.passed == expected, f"{formula_name}: {report.verdict.summary}"
        if not formula.correct and report.verdict.passed:
            assert report.cosine == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("name", GALLERY)
def test_corrected_passes_through_a_case_on_3d_inputs(name):
    family = families()[name]
    params = (("dim", 1),) if "dim" in family.params else ()
    for dtype in ("float64", "float32"):
        case = Case(family=name, formulas=("corrected",), shape=(3, 4, 5), params=params, seed=4, dtype=dtype)
        report = compare_case(case, "corrected")
        assert report.verdict.passed, f"{dtype}: {report.verdict.summary}"
        assert report.input("x").gradients["analytic"].shape == (3, 4, 5)


@pytest.mark.parametrize("name", GALLERY)
def test_loss_gradients_under_vmap_equal_one_by_one(name):
    # what the loss-landscape page does: torch.func.grad of the loss, vmapped over points
    family = families()[name]
    (x,) = family.build_inputs((3, 5))
    points = torch.stack([x, 0.5 * x, x + 1])

    def loss_at(point):
        return family.loss(family.run("corrected", (point,)))

    batched = torch.func.vmap(torch.func.grad(loss_at))(points)
    for point, got in zip(points, batched):
        p = point.clone().requires_grad_()
        (want,) = torch.autograd.grad(family.loss(family.run(None, (p,))), p)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
