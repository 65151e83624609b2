"""What every gallery family's tests ask of it: the corrected formula is the reference (values, first
and second derivatives) and passes every conformance check; the reference agrees with finite
differences; a buggy formula's report fails where the bug bites."""

import numpy as np
import torch
from torch.autograd import gradcheck

from gradient_lab.engine.pipeline import compare_gradients
from gradient_lab.contract.conformance import conformance_report
from gradient_lab.app.family import Family

F64 = torch.float64


def _random(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def derivatives(function, x: torch.Tensor):
    """y, the gradient for a random upstream v, and the derivative of that gradient along a random u
    (double backward)."""
    x = x.detach().requires_grad_()
    y = function(x)
    v, u = _random(y.shape, 1).to(y.dtype), _random(x.shape, 2).to(x.dtype)
    (grad,) = torch.autograd.grad(y, x, v, create_graph=True)
    (second,) = torch.autograd.grad((grad * u).sum(), x)
    return y.detach(), grad.detach(), second


def assert_corrected_is_reference(family: Family, x: torch.Tensor, *, rtol=1e-12, atol=1e-12, **params):
    """Values, gradients and second derivatives of ``corrected`` equal autograd through the reference."""
    got = derivatives(lambda t: family.run("corrected", (t,), **params), x)
    want = derivatives(lambda t: family.run(None, (t,), **params), x)
    for what, a, b in zip(("values", "gradients", "second derivatives"), got, want):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")  # noqa: B023 - called at once


def conformance_statuses(family: Family, x: torch.Tensor, **params) -> dict[str, str]:
    merged = {**family.params, **params}
    function = family.formula("corrected").function
    checks = conformance_report(lambda t: function(t, **merged), (x,))
    return {c.name: c.status + (f": {c.message}" if c.status != "pass" else "") for c in checks}


def assert_conformant(family: Family, x: torch.Tensor, **params):
    statuses = conformance_statuses(family, x, **params)
    assert all(s == "pass" for s in statuses.values()), statuses


def assert_reference_matches_finite_differences(family: Family, x: torch.Tensor, **params):
    merged = {**family.params, **params}
    assert gradcheck(lambda t: family.reference(t, **merged), (x.detach().double().requires_grad_(),))


def report(family: Family, formula: str, x: torch.Tensor, *, ones=False, **params):
    """compare_gradients on one input; ``ones``: an upstream gradient of ones (a plain sum)."""
    grad_output = None
    if ones:
        with torch.no_grad():
            grad_output = torch.ones_like(family.run(None, (x,), **params))
    return compare_gradients(family, formula, (x,), params=params, grad_output=grad_output)


def worst(result, pair=("analytic", "reference")):
    return result.input("x").errors[pair].worst


def non_finite_analytic(result) -> set[tuple[int, ...]]:
    """Every index where the analytic gradient is NaN or inf."""
    return {tuple(int(i) for i in index) for index in np.argwhere(~np.isfinite(result.input("x").gradients["analytic"]))}
