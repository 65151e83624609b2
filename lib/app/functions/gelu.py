"""GELU (exact, erf form): a backward that forgets the product rule, one borrowed from the tanh approximation, and a correct one.

Maths, elementwise, with Φ the standard normal CDF and φ its density::

    y      = x · Φ(x),   Φ(x) = (1 + erf(x/√2)) / 2
    ∂y/∂x  = Φ(x) + x · φ(x),   φ(x) = exp(−x²/2) / √(2π)

Dropping the x · φ(x) term is off by up to 0.24 (at x = ±1). The tanh approximation's derivative,
used under the exact forward, is off by at most 9e-4 (near x = ±2): gradcheck's float64
tolerances catch it, float32's (atol 1e-2) do not.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..family import Family, Formula, register
from .common import opmath, single_input, specimen, weighted_sum

Tensor = torch.Tensor
SQRT_HALF = math.sqrt(0.5)
INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
TANH_K = math.sqrt(2 / math.pi)


def _phi(x: Tensor) -> Tensor:
    """Φ(x) = erfc(−x/√2) / 2: the same as (1 + erf(x/√2)) / 2, without its cancellation for
    negative x (where erf is near −1 and 1 + erf loses every digit)."""
    return 0.5 * torch.special.erfc(-x * SQRT_HALF)


def _gelu(x: Tensor) -> Tensor:
    # y = x · Φ(x) (in float32 for half inputs)
    wide = opmath(x)
    return (wide * _phi(wide)).to(x.dtype)


class _GeluForward(torch.autograd.Function):
    """The right forward, shared by the buggy formulas below: only their backward differs."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return _gelu(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])


class ProductRuleGeluFunction(_GeluForward):
    """Differentiates x · Φ(x) as if Φ(x) were a constant: keeps Φ(x), drops x · φ(x)."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        # ∇x = g · Φ(x)    BUG: the product rule's second term, x · φ(x), is missing
        return grad_output * 0.5 * (1 + torch.erf(x * SQRT_HALF))


class TanhBackwardGeluFunction(_GeluForward):
    """The exact forward with the backward of the tanh approximation, copied from another kernel."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        t = torch.tanh(TANH_K * (x + 0.044715 * x**3))  # BUG: the forward is erf GELU, not tanh GELU
        # ∇x = g · (½(1 + t) + ½x(1 − t²) · k(1 + 3·0.044715x²)),  t = tanh(k(x + 0.044715x³)), k = √(2/π)
        return grad_output * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * TANH_K * (1 + 3 * 0.044715 * x * x))


def _slope(x: Tensor) -> Tensor:
    wide = opmath(x)
    return (_phi(wide) + wide * INV_SQRT_2PI * torch.exp(-0.5 * wide * wide)).to(x.dtype)


class GeluFunction(torch.autograd.Function):
    """``F.gelu(x)`` (approximate="none") with a hand-written backward: double backward, jvp and vmap."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return _gelu(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        # ∇x = g · (Φ(x) + x · φ(x))
        return grad_output * _slope(x)

    @staticmethod
    def jvp(ctx, x_tangent):
        (x,) = ctx.saved_tensors
        # ẏ = (Φ(x) + x · φ(x)) · ẋ
        return x_tangent * _slope(x)


def gelu_reference(x: Tensor) -> Tensor:
    """Ground truth: PyTorch's own ``F.gelu`` (erf form), differentiated by autograd."""
    return F.gelu(x)


FAMILY = register(
    Family(
        name="gelu",
        title="GELU",
        description="y = x · Φ(x) elementwise, as F.gelu (erf form); loss = a fixed random weighting of y, summed.",
        input_names=("x",),
        reference=gelu_reference,
        formulas={
            "product-rule": Formula(
                "product-rule",
                ProductRuleGeluFunction.apply,
                "Forgets the product rule: Φ(x) without x · φ(x), off by up to 0.24 at x = ±1.",
                r"\nabla_x = g\,\Phi(x)",
                correct=False,
            ),
            "tanh-backward": Formula(
                "tanh-backward",
                TanhBackwardGeluFunction.apply,
                "Exact forward, tanh approximation's backward: off by ≤ 9e-4 near x = ±2; gradcheck's float32 tolerances (1e-2) would miss it.",
                r"\nabla_x = g\Big(\tfrac12(1 + t) + \tfrac12 x\,(1 - t^2)\,k\,(1 + 0.134145\,x^2)\Big),"
                r"\ \ t = \tanh\!\big(k(x + 0.044715\,x^3)\big),\ k = \sqrt{2/\pi}",
                correct=False,
            ),
            "corrected": Formula(
                "corrected",
                GeluFunction.apply,
                "Φ(x) + x · φ(x); double backward, jvp and vmap.",
                r"\nabla_x = g\,\big(\Phi(x) + x\,\varphi(x)\big)",
                correct=True,
            ),
        },
        build_inputs=single_input,
        loss=weighted_sum,
        params={},
        forward_latex=r"y = x\,\Phi(x) = \frac{x}{2}\Big(1 + \operatorname{erf}\frac{x}{\sqrt 2}\Big)",
        gradient_latex=r"\frac{\partial y}{\partial x} = \Phi(x) + x\,\varphi(x),\quad \varphi(x) = \frac{e^{-x^2/2}}{\sqrt{2\pi}}",
        specimen=specimen(ProductRuleGeluFunction),
    )
)
