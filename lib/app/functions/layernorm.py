"""Layer normalisation along ``dim`` (no affine part): backwards that hold the mean or the variance constant, and a correct one.

Maths, per slice of ``N`` elements along ``dim``, with ``μ = mean x``, ``σ² = mean (x − μ)²``
(biased, as ``F.layer_norm``) and ``r = 1/√(σ² + eps)``::

    ŷ      = (x − μ) · r
    ∇x     = r · (g − mean(g) − ŷ · mean(g ⊙ ŷ))

The ``− mean(g)`` term is the mean's gradient, the ``− ŷ · mean(g ⊙ ŷ)`` term the variance's.
Dropping either is the classic first attempt at a normalisation backward. Both missing terms
vanish when summed along the row, so a loss of plain ``ŷ.sum()`` (g = 1) cannot see the
variance's: the family's loss weighs each output by a fixed random weight.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..family import Family, Formula, register
from .common import single_input, specimen, weighted_sum

Tensor = torch.Tensor


def _wide(x: Tensor) -> Tensor:
    """Inputs below float64 computed in float64: the normalisation's derivatives hold r³ = 1/σ³,
    which is subnormal in float32 once σ passes about 1e13, and cancellations in its means.
    Results are rounded back to the input's dtype."""
    return x.double() if x.dtype in (torch.float32, torch.float16, torch.bfloat16) else x


def _layer_norm(x: Tensor, dim: int, eps: float) -> Tensor:
    # ŷ = (x − μ) / √(σ² + eps), σ² the biased variance
    wide = _wide(x)
    return ((wide - wide.mean(dim, keepdim=True)) * _rstd(wide, dim, eps)).to(x.dtype)


def _rstd(x: Tensor, dim: int, eps: float) -> Tensor:
    wide = _wide(x)
    return torch.rsqrt(wide.var(dim, correction=0, keepdim=True) + eps)


class _LayerNormForward(torch.autograd.Function):
    """The right forward, shared by the buggy formulas below: only their backward differs."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim=-1, eps=1e-5):
        return _layer_norm(x, dim, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)
        ctx.dim, ctx.eps = inputs[1], inputs[2]


class MeanIgnoredLayerNormFunction(_LayerNormForward):
    """Differentiates as if the mean were a constant: keeps the variance's term, drops the mean's."""

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        g, d = grad_output, ctx.dim
        # ∇x = r · (g − ŷ · mean(g ⊙ ŷ))    BUG: the mean's term, − mean(g), is missing
        return _rstd(x, d, ctx.eps) * (g - y * (g * y).mean(d, keepdim=True)), None, None


class VarianceIgnoredLayerNormFunction(_LayerNormForward):
    """Differentiates as if the variance were a constant: centres g, never projects out ŷ."""

    @staticmethod
    def backward(ctx, grad_output):
        x, _ = ctx.saved_tensors
        g, d = grad_output, ctx.dim
        # ∇x = r · (g − mean(g))    BUG: the variance's term, − ŷ · mean(g ⊙ ŷ), is missing
        return _rstd(x, d, ctx.eps) * (g - g.mean(d, keepdim=True)), None, None


def _vjp(x: Tensor, y: Tensor, v: Tensor, dim: int, eps: float) -> Tensor:
    """Jᵀv = Jv: the Jacobian r (I − 1/N − ŷ ŷᵀ/N) is symmetric (in float32 for half inputs)."""
    wide_v, wide_y = _wide(v), _wide(y)
    out = _rstd(x, dim, eps) * (wide_v - wide_v.mean(dim, keepdim=True) - wide_y * (wide_v * wide_y).mean(dim, keepdim=True))
    return out.to(v.dtype)


class LayerNormFunction(torch.autograd.Function):
    """``F.layer_norm`` over one dim, without weight and bias, with a hand-written backward:
    double backward, jvp and vmap."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim=-1, eps=1e-5):
        return _layer_norm(x, dim, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim, eps = inputs
        ctx.save_for_backward(x, output)
        ctx.save_for_forward(x, output)
        ctx.dim, ctx.eps = dim, eps

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        # ∇x = r · (g − mean(g) − ŷ · mean(g ⊙ ŷ))
        return _vjp(x, y, grad_output, ctx.dim, ctx.eps), None, None

    @staticmethod
    def jvp(ctx, x_tangent, _dim_tangent, _eps_tangent):
        x, y = ctx.saved_tensors
        # ẏ = r · (ẋ − mean(ẋ) − ŷ · mean(ẋ ⊙ ŷ))
        return _vjp(x, y, x_tangent, ctx.dim, ctx.eps)


def layernorm_reference(x: Tensor, dim: int = -1, eps: float = 1e-5) -> Tensor:
    """Ground truth: PyTorch's own ``F.layer_norm`` over ``dim`` (moved last and back), by autograd."""
    moved = x.movedim(dim, -1)
    return F.layer_norm(moved, moved.shape[-1:], eps=eps).movedim(-1, dim)


FAMILY = register(
    Family(
        name="layernorm",
        title="Layer normalisation",
        description="ŷ = (x − mean x) / √(var x + eps) along dim, as F.layer_norm without weight and bias; "
        "loss = a fixed random weighting of ŷ, summed.",
        input_names=("x",),
        reference=layernorm_reference,
        formulas={
            "variance-ignored": Formula(
                "variance-ignored",
                VarianceIgnoredLayerNormFunction.apply,
                "Treats the variance as a constant: r · (g − mean g), the − ŷ · mean(g ⊙ ŷ) term missing.",
                r"\nabla_x = r\,\big(g - \overline{g}\big)",
                correct=False,
            ),
            "mean-ignored": Formula(
                "mean-ignored",
                MeanIgnoredLayerNormFunction.apply,
                "Treats the mean as a constant: r · (g − ŷ · mean(g ⊙ ŷ)), the − mean g term missing.",
                r"\nabla_x = r\,\big(g - \hat y\,\overline{g \odot \hat y}\big)",
                correct=False,
            ),
            "corrected": Formula(
                "corrected",
                LayerNormFunction.apply,
                "Both terms, r · (g − mean g − ŷ · mean(g ⊙ ŷ)); double backward, jvp and vmap.",
                r"\nabla_x = r\,\big(g - \overline{g} - \hat y\,\overline{g \odot \hat y}\big)",
                correct=True,
            ),
        },
        build_inputs=single_input,
        loss=weighted_sum,
        params={"dim": -1, "eps": 1e-5},
        forward_latex=r"\hat y = \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}},\quad \mu = \overline{x},"
        r"\quad \sigma^2 = \overline{(x - \mu)^2}\qquad(\overline{\,\cdot\,}:\ \text{the mean of the N elements along dim})",
        gradient_latex=r"\frac{\partial \hat y_i}{\partial x_j} = \frac{r}{N}\big(N\delta_{ij} - 1 - \hat y_i\,\hat y_j\big),"
        r"\quad r = \frac{1}{\sqrt{\sigma^2 + \varepsilon}}",
        specimen=specimen(VarianceIgnoredLayerNormFunction),
    )
)
