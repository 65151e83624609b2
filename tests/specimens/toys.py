"""Small families written for the tests: a broken Function with a known worst element, a Function
with a dense Jacobian, and a formula whose forward reaches further than its reference."""

import torch

from gradient_lab.app.family import Family, Formula
from tests.specimens.zoo import Square


def single_input(x_shape=(4, 5)):
    def build(shape, *, seed=0, dtype=torch.float64, device="cpu", **_):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device),)

    return build


class SquareWithBrokenElement(Square):
    """y = x², but the backward adds 1 at flat index 7."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        grad = 2 * x * g
        bump = torch.zeros_like(grad).reshape(-1)
        bump[7] = 1.0
        return grad + bump.reshape(grad.shape)


class ScaledBySum(torch.autograd.Function):
    """y = x · Σx: every output depends on every input (a dense Jacobian). Correct backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.sum()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.sum() + (g * x).sum()


def _family(name, formulas, reference):
    return Family(
        name=name,
        title=name,
        description=name,
        input_names=("x",),
        reference=reference,
        formulas=formulas,
        build_inputs=single_input(),
        loss=lambda y: (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)).sum(),
    )


def broken_square_family():
    formula = Formula("broken", lambda x: SquareWithBrokenElement.apply(x), "wrong at [1, 2]", "", correct=False)
    return _family("toy-square", {"broken": formula}, lambda x: x * x)


def dense_family(with_reference=True):
    formula = Formula("scaled", lambda x: ScaledBySum.apply(x), "dense", "", correct=True)
    return _family("toy-dense", {"scaled": formula}, (lambda x: x * x.sum()) if with_reference else None)


def reaching_family():
    """The formula's forward mixes neighbours; its (wrong) reference does not: the reference's
    pattern misses dependencies, and the engine must notice."""
    forward = lambda x: x * x + 0.5 * torch.roll(x, 1, dims=-1)  # noqa: E731
    formula = Formula("reaching", forward, "plain autograd", "", correct=True)
    return _family("toy-reaching", {"reaching": formula}, lambda x: x * x)
