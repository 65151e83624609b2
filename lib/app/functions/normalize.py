"""L2 normalisation along ``dim`` (``F.normalize``): an unclamped backward, one without the projection, and a correct one.

Maths, per slice along ``dim``, with ``n = ‖x‖`` and ``c = max(n, eps)``::

    y      = x / c
    ∇x     = (g − y (y·g)) / n      where n ≥ eps
    ∇x     = g / eps                where n < eps (the norm is clamped: a constant)

The forward clamps the norm so that a zero row gives 0, not 0/0; a backward that divides by the
unclamped norm brings the NaN back, and any row below eps gets a gradient ≈ 1/n instead of 1/eps.
Without the projection term the backward differentiates x but not its norm, so following it
changes the length of x, which y ignores.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..family import Family, Formula, register
from .common import opmath, single_input, specimen, weighted_sum

Tensor = torch.Tensor


def _norm(x: Tensor, dim: int) -> Tensor:
    return torch.linalg.vector_norm(x, dim=dim, keepdim=True)


class _NormalizeForward(torch.autograd.Function):
    """The right forward, shared by the buggy formulas below: only their backward differs."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim=-1, eps=1e-12):
        return x / _norm(x, dim).clamp_min(eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)
        ctx.dim, ctx.eps = inputs[1], inputs[2]


class UnclampedNormalizeFunction(_NormalizeForward):
    """A clamped forward whose backward divides by the raw norm: NaN on a zero row, far off below eps."""

    @staticmethod
    def backward(ctx, grad_output):
        x, _ = ctx.saved_tensors
        n = _norm(x, ctx.dim)
        u = x / n  # BUG: no clamp here; 0/0 = NaN on a zero row
        # ∇x = (g − u (u·g)) / ‖x‖
        return (grad_output - u * (u * grad_output).sum(ctx.dim, keepdim=True)) / n, None, None


class NoProjectionNormalizeFunction(_NormalizeForward):
    """Divides g by the norm and stops: the derivative of x / c with c held constant."""

    @staticmethod
    def backward(ctx, grad_output):
        x, _ = ctx.saved_tensors
        # ∇x = g / max(‖x‖, eps)    BUG: the − y (y·g) term from the norm's own gradient is missing
        return grad_output / _norm(x, ctx.dim).clamp_min(ctx.eps), None, None


def _vjp(x: Tensor, y: Tensor, v: Tensor, dim: int, eps: float) -> Tensor:
    """Jᵀv = Jv: the Jacobian (I − [n ≥ eps] y yᵀ) / c is symmetric (in float32 for half inputs)."""
    x, y, wide = opmath(x), opmath(y), opmath(v)
    n = _norm(x, dim)
    projected = torch.where(n >= eps, (wide * y).sum(dim, keepdim=True), torch.zeros_like(n))
    return ((wide - y * projected) / n.clamp_min(eps)).to(v.dtype)


class NormalizeFunction(torch.autograd.Function):
    """``F.normalize(x, p=2, dim, eps)`` with a hand-written backward: clamped as PyTorch clamps,
    double backward, jvp and vmap."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim=-1, eps=1e-12):
        # y = x / max(‖x‖, eps) (in float32 for half inputs)
        wide = opmath(x)
        return (wide / _norm(wide, dim).clamp_min(eps)).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim, eps = inputs
        ctx.save_for_backward(x, output)
        ctx.save_for_forward(x, output)
        ctx.dim, ctx.eps = dim, eps

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        # ∇x = (g − [‖x‖ ≥ eps] · y (y·g)) / max(‖x‖, eps): a clamped norm is a constant
        return _vjp(x, y, grad_output, ctx.dim, ctx.eps), None, None

    @staticmethod
    def jvp(ctx, x_tangent, _dim_tangent, _eps_tangent):
        x, y = ctx.saved_tensors
        # ẏ = (ẋ − [‖x‖ ≥ eps] · y (y·ẋ)) / max(‖x‖, eps)
        return _vjp(x, y, x_tangent, ctx.dim, ctx.eps)


def normalize_reference(x: Tensor, dim: int = -1, eps: float = 1e-12) -> Tensor:
    """Ground truth: PyTorch's own ``F.normalize``, differentiated by autograd."""
    return F.normalize(x, p=2.0, dim=dim, eps=eps)


FAMILY = register(
    Family(
        name="normalize",
        title="L2 normalisation",
        description="y = x / max(‖x‖, eps) along dim, as F.normalize; loss = a fixed random weighting of y, summed.",
        input_names=("x",),
        reference=normalize_reference,
        formulas={
            "unclamped": Formula(
                "unclamped",
                UnclampedNormalizeFunction.apply,
                "Backward divides by the unclamped norm: NaN on a zero row, ≈ 1/‖x‖ instead of 1/eps below eps.",
                r"\nabla_x = \frac{g - u\,(u\cdot g)}{\lVert x\rVert},\quad u = \frac{x}{\lVert x\rVert}\quad(\tfrac{0}{0}\ \text{at}\ x = 0)",
                correct=False,
            ),
            "no-projection": Formula(
                "no-projection",
                NoProjectionNormalizeFunction.apply,
                "Divides g by the norm and forgets the norm's own gradient, − y (y·g).",
                r"\nabla_x = \frac{g}{\max(\lVert x\rVert, \varepsilon)}",
                correct=False,
            ),
            "corrected": Formula(
                "corrected",
                NormalizeFunction.apply,
                "Projection and clamp as PyTorch has them, zero rows included; double backward, jvp and vmap.",
                r"\nabla_x = \frac{g - [\lVert x\rVert \ge \varepsilon]\;y\,(y\cdot g)}{\max(\lVert x\rVert, \varepsilon)}",
                correct=True,
            ),
        },
        build_inputs=single_input,
        loss=weighted_sum,
        params={"dim": -1, "eps": 1e-12},
        forward_latex=r"y = \frac{x}{\max(\lVert x\rVert, \varepsilon)}",
        gradient_latex=r"\nabla_x = \frac{g - y\,(y\cdot g)}{\lVert x\rVert}\ \text{if}\ \lVert x\rVert \ge \varepsilon,"
        r"\quad \nabla_x = \frac{g}{\varepsilon}\ \text{otherwise}",
        specimen=specimen(UnclampedNormalizeFunction),
    )
)
