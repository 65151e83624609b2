"""Log-sum-exp along ``dim``: the textbook formula that overflows, one that forgets to normalise, and a stable one.

Maths, per slice along ``dim``, with ``m = max x``::

    y      = log Σ exp(x) = m + log Σ exp(x − m)
    ∂y/∂x  = exp(x) / Σ exp(x) = exp(x − y) = softmax(x)

Written as ``log(exp(x).sum())``, exp(x) overflows to inf once x > 88.7 in float32 (709.8 in
float64): the forward gives inf and the backward inf/inf = NaN where it overflowed. Shifting by
the max keeps every exponent ≤ 0; the backward then needs the shift by ``y``, not by ``m``.
"""

from __future__ import annotations

import torch

from ..family import Family, Formula, register
from .common import opmath, single_input, specimen, weighted_sum

Tensor = torch.Tensor


class NaiveLogSumExpFunction(torch.autograd.Function):
    """The textbook formula: right until exp(x) overflows, then inf forward and NaN backward."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim=-1):
        return torch.log(torch.exp(x).sum(dim))  # BUG: exp(x) = inf once x > 88.7 (float32)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.dim = inputs[1]

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        e = torch.exp(x)
        # ∇x = g · exp(x) / Σ exp(x)    BUG: inf / inf = NaN where exp(x) overflowed
        return grad_output.unsqueeze(ctx.dim) * e / e.sum(ctx.dim, keepdim=True), None


class UnnormalisedLogSumExpFunction(torch.autograd.Function):
    """A stable forward whose backward reuses the forward's shift, the max, where the LSE belongs."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim=-1):
        m = x.amax(dim, keepdim=True)
        return (m + torch.log(torch.exp(x - m).sum(dim, keepdim=True))).squeeze(dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.dim = inputs[1]

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        # ∇x = g · exp(x − m)    BUG: exp(x − max x) is not divided by Σ exp(x − m); exp(x − y) is
        return grad_output.unsqueeze(ctx.dim) * torch.exp(x - x.amax(ctx.dim, keepdim=True)), None


def _shift(x: Tensor, dim: int) -> Tensor:
    """max x along dim (kept), with an infinite max replaced by 0, as ``torch.logsumexp`` does."""
    m = x.amax(dim, keepdim=True)
    return torch.where(m.isinf(), torch.zeros_like(m), m)


def _softmax(x: Tensor, y: Tensor, dim: int) -> Tensor:
    """exp(x − logsumexp x) = softmax(x), in float32 for half inputs."""
    return torch.exp(opmath(x) - opmath(y).unsqueeze(dim))


class LogSumExpFunction(torch.autograd.Function):
    """``torch.logsumexp(x, dim)`` with a hand-written backward: stable, double backward, jvp, vmap."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim=-1):
        # y = m + log Σ exp(x − m): the largest term is exp(0) = 1, nothing overflows (float32 for half inputs)
        wide = opmath(x)
        m = _shift(wide, dim)
        return (m + torch.log(torch.exp(wide - m).sum(dim, keepdim=True))).squeeze(dim).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim = inputs
        ctx.save_for_backward(x, output)
        ctx.save_for_forward(x, output)
        ctx.dim = dim

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        # ∇x = g · exp(x − y) = g · softmax(x)
        return (opmath(grad_output).unsqueeze(ctx.dim) * _softmax(x, y, ctx.dim)).to(x.dtype), None

    @staticmethod
    def jvp(ctx, x_tangent, _dim_tangent):
        x, y = ctx.saved_tensors
        # ẏ = Σ softmax(x) · ẋ
        return (_softmax(x, y, ctx.dim) * opmath(x_tangent)).sum(ctx.dim).to(y.dtype)


def logsumexp_reference(x: Tensor, dim: int = -1) -> Tensor:
    """Ground truth: PyTorch's own ``torch.logsumexp``, differentiated by autograd."""
    return torch.logsumexp(x, dim)


FAMILY = register(
    Family(
        name="logsumexp",
        title="Log-sum-exp",
        description="y = log Σ exp(x) along dim; loss = a fixed random weighting of y, summed.",
        input_names=("x",),
        reference=logsumexp_reference,
        formulas={
            "naive": Formula(
                "naive",
                NaiveLogSumExpFunction.apply,
                "log(exp(x).sum()): exp overflows for x > 88.7 in float32 (709.8 in float64), then NaN.",
                r"\nabla_x = g\,\frac{e^{x}}{\sum_j e^{x_j}}\quad(\tfrac{\infty}{\infty} = \mathrm{NaN}\ \text{once}\ e^{x}\ \text{overflows})",
                correct=False,
            ),
            "unnormalised": Formula(
                "unnormalised",
                UnnormalisedLogSumExpFunction.apply,
                "Backward shifts by the max m instead of by y: exp(x − m) is never divided by Σ exp(x − m).",
                r"\nabla_x = g\,e^{x - m},\quad m = \max_j x_j",
                correct=False,
            ),
            "corrected": Formula(
                "corrected",
                LogSumExpFunction.apply,
                "Shifted by the max in forward, by y in backward: stable; double backward, jvp and vmap.",
                r"\nabla_x = g\,e^{x - y}",
                correct=True,
            ),
        },
        build_inputs=single_input,
        loss=weighted_sum,
        params={"dim": -1},
        forward_latex=r"y = \log\sum_j e^{x_j} = m + \log\sum_j e^{x_j - m},\quad m = \max_j x_j",
        gradient_latex=r"\frac{\partial y}{\partial x_i} = \frac{e^{x_i}}{\sum_j e^{x_j}} = e^{x_i - y} = \operatorname{softmax}(x)_i",
        specimen=specimen(NaiveLogSumExpFunction),
    )
)
