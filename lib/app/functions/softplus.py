"""Softplus (``F.softplus``): a backward that overflows, one with the sign of x flipped, and a correct one.

Maths, elementwise::

    y      = log(1 + exp(βx)) / β,   and y = x once βx > 20 (PyTorch's threshold)
    ∂y/∂x  = σ(βx) = 1 / (1 + exp(−βx)),   and 1 once βx > 20

σ(βx) written as exp(βx) / (1 + exp(βx)) is the same number until exp(βx) overflows (βx > 88.7
in float32, 709.8 in float64): then inf / inf = NaN. σ(−βx) is the derivative of softplus(−x)
up to sign, an easy slip since log(1 + e^{−x}) is the other common form of the same family.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..family import Family, Formula, register
from .common import opmath, single_input, specimen, weighted_sum

Tensor = torch.Tensor
THRESHOLD = 20.0  # F.softplus's default: above it, y = x


def _softplus(x: Tensor, beta: float, threshold: float = THRESHOLD) -> Tensor:
    # y = log(1 + exp(βx)) / β, and x where βx > threshold, as F.softplus (in float32 for half inputs)
    wide = opmath(x)
    bx = beta * wide
    return torch.where(bx > threshold, wide, torch.log1p(torch.exp(bx)) / beta).to(x.dtype)


class _SoftplusForward(torch.autograd.Function):
    """The right forward, shared by the buggy formulas below: only their backward differs."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, beta=1.0, threshold=THRESHOLD):
        return _softplus(x, beta, threshold)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.beta, ctx.threshold = inputs[1], inputs[2]


class OverflowingSoftplusFunction(_SoftplusForward):
    """A right forward; its backward writes the sigmoid as exp(βx) / (1 + exp(βx))."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        e = torch.exp(ctx.beta * x)  # BUG: inf once βx > 88.7 (float32), and inf / inf = NaN
        # ∇x = g · exp(βx) / (1 + exp(βx))
        return grad_output * e / (1 + e), None, None


class FlippedSoftplusFunction(_SoftplusForward):
    """A right forward; its backward uses σ(−βx), the slope of softplus(−x) mirrored."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        # ∇x = g · σ(−βx)    BUG: the sign of x is flipped; σ(−βx) = 1 − σ(βx)
        return grad_output * torch.sigmoid(-ctx.beta * x), None, None


def _slope(x: Tensor, beta: float, threshold: float) -> Tensor:
    bx = beta * opmath(x)
    return torch.where(bx > threshold, torch.ones_like(bx), torch.sigmoid(bx)).to(x.dtype)


class SoftplusFunction(torch.autograd.Function):
    """``F.softplus(x, beta)`` with a hand-written backward: the sigmoid never overflows; double
    backward, jvp and vmap."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, beta=1.0, threshold=THRESHOLD):
        return _softplus(x, beta, threshold)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])
        ctx.beta, ctx.threshold = inputs[1], inputs[2]

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        # ∇x = g · σ(βx), and g where βx > threshold
        return grad_output * _slope(x, ctx.beta, ctx.threshold), None, None

    @staticmethod
    def jvp(ctx, x_tangent, _beta_tangent, _threshold_tangent):
        (x,) = ctx.saved_tensors
        # ẏ = σ(βx) · ẋ, and ẋ where βx > threshold
        return x_tangent * _slope(x, ctx.beta, ctx.threshold)


def softplus_reference(x: Tensor, beta: float = 1.0, threshold: float = THRESHOLD) -> Tensor:
    """Ground truth: PyTorch's own ``F.softplus``, differentiated by autograd."""
    return F.softplus(x, beta=beta, threshold=threshold)


FAMILY = register(
    Family(
        name="softplus",
        title="Softplus",
        description="y = log(1 + exp(βx)) / β elementwise, as F.softplus; loss = a fixed random weighting of y, summed.",
        input_names=("x",),
        reference=softplus_reference,
        formulas={
            "overflowing": Formula(
                "overflowing",
                OverflowingSoftplusFunction.apply,
                "Backward exp(βx) / (1 + exp(βx)): NaN once exp overflows (βx > 88.7 in float32, 709.8 in float64).",
                r"\nabla_x = g\,\frac{e^{\beta x}}{1 + e^{\beta x}}\quad(\tfrac{\infty}{\infty} = \mathrm{NaN}\ \text{once}\ e^{\beta x}\ \text{overflows})",
                correct=False,
            ),
            "flipped": Formula(
                "flipped",
                FlippedSoftplusFunction.apply,
                "Backward σ(−βx) instead of σ(βx): right only at x = 0.",
                r"\nabla_x = g\,\sigma(-\beta x)",
                correct=False,
            ),
            "corrected": Formula(
                "corrected",
                SoftplusFunction.apply,
                "σ(βx), and 1 past PyTorch's threshold: never overflows; double backward, jvp and vmap.",
                r"\nabla_x = g\,\sigma(\beta x)\ \ (\beta x \le 20),\qquad \nabla_x = g\ \ (\beta x > 20)",
                correct=True,
            ),
        },
        build_inputs=single_input,
        loss=weighted_sum,
        params={"beta": 1.0, "threshold": THRESHOLD},
        forward_latex=r"y = \tfrac{1}{\beta}\log\big(1 + e^{\beta x}\big)\ \ (\beta x \le 20),\qquad y = x\ \ (\beta x > 20)",
        gradient_latex=r"\frac{\partial y}{\partial x} = \sigma(\beta x) = \frac{1}{1 + e^{-\beta x}}\ \ (\beta x \le 20),\qquad 1\ \ (\beta x > 20)",
        specimen=specimen(OverflowingSoftplusFunction),
    )
)
