"""Softmax along ``dim``: a backward that forgets to subtract, one that subtracts across the whole batch, and a correct one.

Maths, per slice along ``dim``::

    y      = exp(x − m) / Σ exp(x − m),   m = max x
    ∇x     = y ⊙ (g − Σ g·y)

The Jacobian is diag(y) − y yᵀ; dropping the outer product leaves ``y ⊙ g``. With an upstream
gradient of ones the true gradient is zero (the outputs always sum to 1), which is why the family's
loss weighs each output by a fixed random weight: a plain sum would make every error here look small.
"""

from __future__ import annotations

import torch

from ..family import Family, Formula, register
from .common import opmath, single_input, specimen, weighted_sum

Tensor = torch.Tensor


def _softmax(x: Tensor, dim: int) -> Tensor:
    # y = exp(x − m) / Σ exp(x − m): every exponent ≤ 0, nothing overflows (float32 for half inputs)
    wide = opmath(x)
    e = torch.exp(wide - wide.amax(dim, keepdim=True))
    return (e / e.sum(dim, keepdim=True)).to(x.dtype)


class _SoftmaxForward(torch.autograd.Function):
    """The right forward, shared by the buggy formulas below: only their backward differs."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim=-1):
        return _softmax(x, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)


class NoSubtractSoftmaxFunction(_SoftmaxForward):
    """Keeps the Jacobian's diagonal, diag(y), and forgets its outer product, − y yᵀ."""

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        # ∇x = y ⊙ g    BUG: the − y (Σ g·y) term is missing
        return y * grad_output, None


class BatchSumSoftmaxFunction(_SoftmaxForward):
    """Subtracts Σ g·y taken over the whole tensor instead of along ``dim``: right for one row only."""

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        # ∇x = y ⊙ (g − Σ g·y)    BUG: .sum() without dim adds up every row, not each row
        return y * (grad_output - (grad_output * y).sum()), None


def _product(y: Tensor, v: Tensor, dim: int) -> Tensor:
    """y ⊙ (v − Σ v·y): the Jacobian times v, either side (in float32 for half inputs)."""
    wide_y, wide_v = opmath(y), opmath(v)
    return (wide_y * (wide_v - (wide_v * wide_y).sum(dim, keepdim=True))).to(v.dtype)


class SoftmaxFunction(torch.autograd.Function):
    """``torch.softmax(x, dim)`` with a hand-written backward: double backward, jvp and vmap."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim=-1):
        return _softmax(x, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)
        ctx.dim = inputs[1]

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        # ∇x = y ⊙ (g − Σ g·y), the sum along dim
        return _product(y, grad_output, ctx.dim), None

    @staticmethod
    def jvp(ctx, x_tangent, _dim_tangent):
        (y,) = ctx.saved_tensors
        # ẏ = y ⊙ (ẋ − Σ y·ẋ): the Jacobian is symmetric
        return _product(y, x_tangent, ctx.dim)


def softmax_reference(x: Tensor, dim: int = -1) -> Tensor:
    """Ground truth: PyTorch's own ``torch.softmax``, differentiated by autograd."""
    return torch.softmax(x, dim)


FAMILY = register(
    Family(
        name="softmax",
        title="Softmax",
        description="y = exp(x) / Σ exp(x) along dim; loss = a fixed random weighting of y, summed.",
        input_names=("x",),
        reference=softmax_reference,
        formulas={
            "no-subtract": Formula(
                "no-subtract",
                NoSubtractSoftmaxFunction.apply,
                "Forgets the − y yᵀ part of the Jacobian: backward is y ⊙ g.",
                r"\nabla_x = y \odot g",
                correct=False,
            ),
            "batch-sum": Formula(
                "batch-sum",
                BatchSumSoftmaxFunction.apply,
                "Subtracts Σ g·y over the whole batch instead of along dim: right only for a single row.",
                r"\nabla_x = y \odot \Big(g - \sum_{\text{all rows}} g \odot y\Big)",
                correct=False,
            ),
            "corrected": Formula(
                "corrected",
                SoftmaxFunction.apply,
                "y ⊙ (g − Σ g·y) along dim; double backward, jvp and vmap.",
                r"\nabla_x = y \odot \big(g - (g\cdot y)\big)",
                correct=True,
            ),
        },
        build_inputs=single_input,
        loss=weighted_sum,
        params={"dim": -1},
        forward_latex=r"y_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}},\quad m = \max_j x_j",
        gradient_latex=r"\frac{\partial y_i}{\partial x_j} = y_i\,(\delta_{ij} - y_j),\qquad \nabla_x = y \odot \big(g - (g\cdot y)\big)",
        specimen=specimen(NoSubtractSoftmaxFunction),
    )
)
