"""Cosine similarity: the tutorial's custom Function, variants that isolate its bugs, and a corrected one.

The tutorial (``shared/reference/cosine_tutorial.md``) publishes ``CosineSimilarityLossFunction``
whose backward is wrong twice: the sign is flipped, and the 1/(‖x1‖‖x2‖) normalisation is missing.
It also reduces over ``dim=-1`` in backward while the forward uses ``dim=1``. This module keeps
the specimen exactly as published, one variant per fix so that each bug can be seen alone, and
``CosineSimilarityFunction``, which equals ``torch.nn.functional.cosine_similarity`` in values and
in gradients, supports double backward, forward-mode AD and vmap.

Maths, per slice along ``dim``, with ``n_i = ‖x_i‖`` and ``c_i = max(n_i, eps)``::

    y        = x1·x2 / (c1 c2)
    ∂y/∂x1   = x2 / (c1 c2) − y · x1 / (c1 n1)

The second term uses ``n1`` where one might expect ``c1``: PyTorch clamps the norms under
``no_grad``, so where a norm is clamped its autograd still differentiates the norm as if it were
not. That is PyTorch's gradient, not the derivative of its forward, and we match PyTorch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..family import Family, Formula, register
from .common import opmath
from .common import specimen

Tensor = torch.Tensor


# --------------------------------------------------------------------------------------------
# The specimen: the tutorial's code exactly as published. Never fix it.
# --------------------------------------------------------------------------------------------


class CosineSimilarityLossFunction(torch.autograd.Function):
    """The tutorial's Function, exactly as published. Its backward is wrong:

    1. **Sign flipped.** The forward returns the similarity (the ``1 - sim`` of the loss is applied
       outside), yet the backward returns the negated gradient, so it points uphill.
    2. **Normalisation missing.** It projects with the raw inputs instead of unit vectors and never
       divides by ‖x1‖‖x2‖; it is only right in size when both inputs have unit norm.
    3. **Dimension mismatch.** The forward reduces over ``dim=1``; the backward over ``dim=-1``.
       For 3-D inputs ``(B, C, L)`` with ``C != L`` the backward raises a shape error; with ``C == L``
       it silently returns a gradient along the wrong axis.

    On unit-norm 2-D inputs its gradient is exactly minus the true one.
    """

    @staticmethod
    def forward(ctx, input1, input2):
        cos_sim = torch.nn.functional.cosine_similarity(input1, input2)
        ctx.save_for_backward(input1, input2)
        return cos_sim

    @staticmethod
    def backward(ctx, grad_output):
        input1, input2 = ctx.saved_tensors
        grad_input1 = grad_input2 = None

        if ctx.needs_input_grad[0]:
            cosine_loss_grad = grad_output.unsqueeze(-1) * input2
            cosine_loss_grad = cosine_loss_grad - torch.sum(input1 * cosine_loss_grad, dim=-1, keepdim=True) * input1
            grad_input1 = -cosine_loss_grad

        if ctx.needs_input_grad[1]:
            cosine_loss_grad = grad_output.unsqueeze(-1) * input1
            cosine_loss_grad = cosine_loss_grad - torch.sum(input2 * cosine_loss_grad, dim=-1, keepdim=True) * input2
            grad_input2 = -cosine_loss_grad

        return grad_input1, grad_input2


class CosineSimilarityLoss(torch.nn.Module):
    """The tutorial's loss module, exactly as published: ``mean(1 - sim)``."""

    def __init__(self):
        super().__init__()

    def forward(self, input1, input2):
        sim = CosineSimilarityLossFunction.apply(input1, input2)
        loss = 1 - sim
        return loss.mean()


# --------------------------------------------------------------------------------------------
# Variants: the tutorial's backward with one thing changed at a time.
# --------------------------------------------------------------------------------------------


def _tutorial_variant(name: str, *, fix_sign: bool, fix_norm: bool, doc: str) -> type[torch.autograd.Function]:
    """The tutorial's Function in its own legacy style, taking ``dim`` and ``eps`` through to the
    forward, with the sign and/or the normalisation fixed. Everything else, including the
    backward's reduction over ``dim=-1``, stays as published."""

    class Variant(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input1, input2, dim=1, eps=1e-8):
            cos_sim = torch.nn.functional.cosine_similarity(input1, input2, dim=dim, eps=eps)
            ctx.save_for_backward(input1, input2)
            ctx.eps = eps
            return cos_sim

        @staticmethod
        def backward(ctx, grad_output):
            input1, input2 = ctx.saved_tensors
            grad_input1 = grad_input2 = None
            sign = 1.0 if fix_sign else -1.0

            def one_side(a, b):
                # tutorial: project g·b off a, with a and b as given (right only for unit norms)
                if fix_norm:
                    norm_a = a.norm(dim=-1, keepdim=True).clamp_min(ctx.eps)
                    norm_b = b.norm(dim=-1, keepdim=True).clamp_min(ctx.eps)
                    a, b = a / norm_a, b / norm_b
                cosine_loss_grad = grad_output.unsqueeze(-1) * b
                cosine_loss_grad = cosine_loss_grad - torch.sum(a * cosine_loss_grad, dim=-1, keepdim=True) * a
                # fixed normalisation: the projection of the unit vectors, divided by ‖a‖
                return sign * (cosine_loss_grad / norm_a if fix_norm else cosine_loss_grad)

            if ctx.needs_input_grad[0]:
                grad_input1 = one_side(input1, input2)
            if ctx.needs_input_grad[1]:
                grad_input2 = one_side(input2, input1)
            return grad_input1, grad_input2, None, None

    Variant.__name__ = Variant.__qualname__ = name
    Variant.__doc__ = doc
    return Variant


TutorialFunction = _tutorial_variant(
    "TutorialFunction",
    fix_sign=False,
    fix_norm=False,
    doc="The tutorial's Function with ``dim`` and ``eps`` passed to its forward; its backward is "
    "unchanged (both bugs, and the reduction over dim=-1). Equals the specimen at dim=1, eps=1e-8.",
)
SignFixedFunction = _tutorial_variant(
    "SignFixedFunction",
    fix_sign=True,
    fix_norm=False,
    doc="The tutorial with only the sign corrected: right for unit-norm inputs, wrong in size otherwise.",
)
NormFixedFunction = _tutorial_variant(
    "NormFixedFunction",
    fix_sign=False,
    fix_norm=True,
    doc="The tutorial with only the normalisation added: exactly minus the true gradient everywhere.",
)
SignAndNormFixedFunction = _tutorial_variant(
    "SignAndNormFixedFunction",
    fix_sign=True,
    fix_norm=True,
    doc="The tutorial with both fixes: right on 2-D inputs, still reducing over dim=-1 in backward, "
    "so wrong (or failing) on 3-D inputs with dim=1.",
)


# --------------------------------------------------------------------------------------------
# The corrected Function.
# --------------------------------------------------------------------------------------------


def _result_dtype(x1: Tensor, x2: Tensor) -> torch.dtype:
    """``torch.result_type(x1, x2)`` for floating inputs, written so that torch.compile traces it
    (result_type returns no tensor, which dynamo cannot put in a graph): a 0-d input defers to one
    with dims, as in PyTorch's promotion."""
    if (x1.dim() == 0) != (x2.dim() == 0) and x1.is_floating_point() and x2.is_floating_point():
        return x2.dtype if x1.dim() == 0 else x1.dtype
    return torch.promote_types(x1.dtype, x2.dtype)


def _aligned(x1: Tensor, x2: Tensor, dim: int) -> tuple[Tensor, Tensor, int]:
    """x1 and x2 in their common dtype (PyTorch's promotion), with the same number of dims (at
    least one: a 0-d input is a vector of one element) and the same size along ``dim`` (views,
    no copies), and ``dim`` made non-negative, as ``F.cosine_similarity`` reads them. Other dims
    are left to broadcast in the arithmetic, so each norm is taken over its own input only."""
    dtype = _result_dtype(x1, x2)
    # float16 and bfloat16 in float32 (opmath): their norms' squares and 1/eps terms leave their
    # range; results are rounded back at the end
    x1, x2 = opmath(x1.to(dtype)), opmath(x2.to(dtype))
    ndim = max(x1.dim(), x2.dim(), 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {dim})")
    d = dim % ndim
    x1 = x1.reshape((1,) * (ndim - x1.dim()) + tuple(x1.shape))
    x2 = x2.reshape((1,) * (ndim - x2.dim()) + tuple(x2.shape))
    # PyTorch broadcasts the reduced dim too: a size-1 side is repeated along it
    n = max(x1.shape[d], x2.shape[d])
    along = lambda x: x.expand(*x.shape[:d], n, *x.shape[d + 1 :])  # noqa: E731
    return along(x1), along(x2), d


def _transformed() -> bool:
    """Whether a torch.func transform (vmap, grad, ...) is running: then no branch may depend
    on values. The backward takes its always-safe path there; the forward its one-pass formula
    (the overflow of extreme norms is the price, as in PyTorch)."""
    return torch._C._functorch.peek_interpreter_stack() is not None


def _norm(x: Tensor, dim: int) -> Tensor:
    """‖x‖ along dim (kept), without overflow: where the squares overflow (float32 rows of norm
    1e20, say) the row is scaled by its largest element first. PyTorch's own norm gives inf
    there, and its cosine 0 for parallel rows; this one gives the right value."""
    norm = torch.linalg.vector_norm(x, dim=dim, keepdim=True)
    # under a transform (finite differences' vmap, torch.func) no branch may read values: the
    # plain norm, as PyTorch's own, there
    if _transformed() or not bool(torch.isinf(norm).any()):
        return norm
    # rows whose squares overflow although every element is finite: scaled by their largest element
    largest = x.abs().amax(dim=dim, keepdim=True)
    scale = torch.where(torch.isfinite(largest), largest, torch.ones_like(largest)).clamp_min(torch.finfo(x.dtype).tiny)
    scaled = scale * torch.linalg.vector_norm(x / scale, dim=dim, keepdim=True)
    return torch.where(torch.isinf(norm) & torch.isfinite(largest), scaled, norm)


def _clamped(norm: Tensor, eps: float) -> Tensor:
    """max(‖x‖, eps) as PyTorch takes it: clamped in place under no_grad, so that autograd
    differentiates the unclamped norm (in first and in second order alike)."""
    clamped = norm.clone()
    with torch.no_grad():
        clamped.clamp_min_(eps)
    return clamped


def _fits(norms: Tensor, clamped: Tensor) -> bool:
    """Whether the fast formulas, which multiply the inputs and divide by c1·c2, keep full
    precision in first and second order: the products of the norms (n1·n2, c1·c2) stay between
    √tiny and √max of the dtype, so neither they nor their squares overflow (float16 rows of norm
    1e3) or fall among the subnormals (float16 rows of norm 1e-3, float32 ones of 1e-10)."""
    if _transformed():
        return False
    info = torch.finfo(norms.dtype)
    return bool(((norms >= math.sqrt(info.tiny)) & (clamped <= math.sqrt(info.max))).all())


def _cosine(a1: Tensor, a2: Tensor, dim: int, eps: float) -> Tensor:
    """y = x1·x2 / (max(‖x1‖,eps) max(‖x2‖,eps)) along dim: one pass where the norms allow it;
    else each input normalised first, as PyTorch does, so that nothing overflows."""
    n1, n2 = _norm(a1, dim), _norm(a2, dim)
    c1, c2 = n1.clamp_min(eps), n2.clamp_min(eps)
    if _transformed():  # no branch on values under a transform: the one-pass formula, as fast as finite differences need
        return torch.linalg.vecdot(a1, a2, dim=dim) / (c1 * c2).squeeze(dim)
    if _fits(n1 * n2, c1 * c2):
        y = torch.linalg.vecdot(a1, a2, dim=dim) / (c1 * c2).squeeze(dim)
        if bool(torch.isfinite(y).all()) or not bool(torch.isfinite(a1).all() & torch.isfinite(a2).all()):
            return y
    return ((a1 / c1) * (a2 / c2)).sum(dim)


def _weighted_partials(x1: Tensor, x2: Tensor, y: Tensor, weight: Tensor, dim: int, eps: float):
    """weight · ∂y/∂x1 and weight · ∂y/∂x2 in the broadcast shape.

    ∂y/∂x1 = x2/(c1 c2) − y·x1/(c1 n1), and symmetrically; at n1 = 0 the second term is 0, as
    PyTorch's norm backward makes it. Where c1·c2 overflows it is written on the normalised
    u = x/c instead: (1/c1)·(u2 − y·(c1/n1)·u1).
    """
    n1, n2 = _norm(x1, dim), _norm(x2, dim)
    c1, c2 = _clamped(n1, eps), _clamped(n2, eps)
    w = weight.unsqueeze(dim) if weight.dim() else weight
    y = y.unsqueeze(dim)
    # where(n > 0, n, 1): a zero row has y = 0, so its second term is 0 instead of 0/0
    safe_n1 = torch.where(n1 > 0, n1, torch.ones_like(n1))
    safe_n2 = torch.where(n2 > 0, n2, torch.ones_like(n2))
    if _fits(n1 * n2, c1 * c2):
        w12 = w / (c1 * c2)
        d1 = _scaled(torch.addcmul(x2, x1, y * c2 / safe_n1, value=-1), w12)
        d2 = _scaled(torch.addcmul(x1, x2, y * c1 / safe_n2, value=-1), w12)
        return d1, d2
    u1, u2 = x1 / c1, x2 / c2
    # divided by c, then scaled by w: w/c alone may overflow where the gradient does not
    d1 = _scaled(torch.addcmul(u2, u1, y * c1 / safe_n1, value=-1) / c1, w)
    d2 = _scaled(torch.addcmul(u1, u2, y * c2 / safe_n2, value=-1) / c2, w)
    return d1, d2


def _scaled(fresh: Tensor, factor: Tensor) -> Tensor:
    """``fresh * factor``, in place where it can be: a copy of a large tensor saved (autograd
    allows it, addcmul's backward not needing its output). Under vmap a batched ``factor``
    cannot scale an unbatched ``fresh`` in place; vmap refuses before writing, and the product
    is then taken out of place."""
    try:
        return fresh.mul_(factor)
    except RuntimeError:
        return fresh * factor


class CosineSimilarityFunction(torch.autograd.Function):
    """Cosine similarity with a hand-written, correct backward.

    Same semantics as ``torch.nn.functional.cosine_similarity(x1, x2, dim, eps)``: dtype
    promotion, broadcasting, 0-d inputs, any dim, each norm clamped by eps separately the way
    PyTorch clamps it (so first and second order match PyTorch's where it clamps). Where the
    product of the norms would overflow (float16 rows of norm 1e3), each input is normalised
    before the product, as PyTorch does. Where PyTorch's own norm overflows (float32 rows of norm
    1e20, where it gives 0 for parallel rows), this one scales the rows first and gives the right
    value. Backward is
    built from differentiable ops (double backward works); ``jvp`` gives forward-mode AD;
    ``generate_vmap_rule`` gives vmap.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x1, x2, dim=1, eps=1e-8):
        a1, a2, d = _aligned(x1, x2, dim)
        y = _cosine(a1, a2, d, eps).to(_result_dtype(x1, x2))
        return y.reshape(()) if max(x1.dim(), x2.dim()) == 0 else y

    @staticmethod
    def setup_context(ctx, inputs, output):
        x1, x2, dim, eps = inputs
        ctx.save_for_backward(x1, x2, output)
        ctx.save_for_forward(x1, x2, output)
        ctx.dim, ctx.eps = dim, eps

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2, y = ctx.saved_tensors
        a1, a2, d = _aligned(x1, x2, ctx.dim)
        # ∇x1 = g·(x2/(c1 c2) − y·x1/(c1 n1)), summed back over broadcast dims, in each input's dtype
        d1, d2 = _weighted_partials(a1, a2, y.to(a1.dtype), grad_output.to(a1.dtype), d, ctx.eps)
        grad1 = d1.sum_to_size(x1.shape).to(x1.dtype) if ctx.needs_input_grad[0] else None
        grad2 = d2.sum_to_size(x2.shape).to(x2.dtype) if ctx.needs_input_grad[1] else None
        return grad1, grad2, None, None

    @staticmethod
    def jvp(ctx, t1, t2, _dim_tangent, _eps_tangent):
        x1, x2, y = ctx.saved_tensors
        a1, a2, d = _aligned(x1, x2, ctx.dim)
        # ẏ = Σ (∂y/∂x1 · ẋ1 + ∂y/∂x2 · ẋ2) along dim
        d1, d2 = _weighted_partials(a1, a2, y.to(a1.dtype), torch.ones((), dtype=a1.dtype, device=a1.device), d, ctx.eps)
        out = torch.zeros_like(y)
        for partial, tangent in ((d1, t1), (d2, t2)):
            if tangent is not None:
                t = tangent.to(a1.dtype).reshape((1,) * (a1.dim() - tangent.dim()) + tuple(tangent.shape))
                out = out + (partial * t).sum(d).reshape(y.shape).to(y.dtype)
        return out


# --------------------------------------------------------------------------------------------
# One entry point for every formula, and the family.
# --------------------------------------------------------------------------------------------

FORMULAS: dict[str, type[torch.autograd.Function]] = {
    "tutorial": TutorialFunction,
    "sign-fixed": SignFixedFunction,
    "norm-fixed": NormFixedFunction,
    "sign+norm-fixed": SignAndNormFixedFunction,
    "corrected": CosineSimilarityFunction,
}


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8, *, formula: str = "corrected") -> Tensor:
    """Cosine similarity along ``dim`` computed by the named formula (see ``FORMULAS``)."""
    try:
        function = FORMULAS[formula]
    except KeyError:
        raise ValueError(f"unknown formula {formula!r}; choose one of: {', '.join(FORMULAS)}") from None
    return function.apply(x1, x2, dim, eps)


class CosineSimilarityFormulaLoss(torch.nn.Module):
    """The tutorial's loss, ``mean(1 - sim)``, with the similarity computed by any formula."""

    def __init__(self, formula: str = "corrected", dim: int = 1, eps: float = 1e-8):
        super().__init__()
        if formula not in FORMULAS:
            raise ValueError(f"unknown formula {formula!r}; choose one of: {', '.join(FORMULAS)}")
        self.formula, self.dim, self.eps = formula, dim, eps

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return cosine_loss(cosine_similarity(input1, input2, self.dim, self.eps, formula=self.formula))


def cosine_reference(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Ground truth: PyTorch's own function, differentiated by autograd."""
    return F.cosine_similarity(x1, x2, dim=dim, eps=eps)


def cosine_loss(similarity: Tensor) -> Tensor:
    """The tutorial's loss: ``mean(1 - sim)``."""
    return (1 - similarity).mean()


def build_inputs(
    shape: tuple[int, ...],
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    broadcast: bool = False,
    dim: int = 1,
    **_params,
) -> tuple[Tensor, Tensor]:
    """Two standard-normal inputs of ``shape``; with ``broadcast``, x2 has size 1 on every dim
    but ``dim`` (one vector compared against every slice of x1)."""
    generator = torch.Generator().manual_seed(seed)
    if not -len(shape) <= dim < len(shape):
        raise IndexError(f"dim {dim} is out of range for a {len(shape)}-D shape {tuple(shape)}")
    x1 = torch.randn(shape, generator=generator, dtype=torch.float64)
    shape2 = tuple(n if i == dim % len(shape) else 1 for i, n in enumerate(shape)) if broadcast else shape
    x2 = torch.randn(shape2, generator=generator, dtype=torch.float64)
    # drawn in float64 on the CPU, then cast: the same seed gives the same numbers everywhere
    return x1.to(device=device, dtype=dtype), x2.to(device=device, dtype=dtype)


def _annotated_specimen() -> str:
    """The tutorial's backward as published, with its bugs marked where they happen."""
    marks = {
        "cosine_loss_grad = grad_output.unsqueeze(-1) * input2": "# BUG 2: no 1/(‖x1‖‖x2‖); BUG 3: dim -1, the forward used dim 1",
        "cosine_loss_grad = cosine_loss_grad - torch.sum(input1 * cosine_loss_grad, dim=-1, keepdim=True) * input1":
            "# BUG 2: projects with x1, not x1/‖x1‖",
        "grad_input1 = -cosine_loss_grad": "# BUG 1: sign flipped (the forward returns +similarity)",
        "grad_input2 = -cosine_loss_grad": "# BUG 1: sign flipped",
    }
    source = specimen(CosineSimilarityLossFunction)
    return "\n".join(f"{line}  {marks[line.strip()]}" if line.strip() in marks else line for line in source.splitlines())


def cosine_target(inputs: tuple[Tensor, ...], index: int, params) -> Tensor | None:
    """Where minimising the loss pulls input ``index``: the other input's direction, at this
    input's norm, slice by slice along dim. None when the other input does not have its shape."""
    x, other = inputs[index], inputs[1 - index]
    dim = params.get("dim", 1)
    try:
        other = other.expand_as(x)
        norm = torch.linalg.vector_norm(x, dim=dim, keepdim=True)
        return other * norm / torch.linalg.vector_norm(other, dim=dim, keepdim=True).clamp_min(1e-30)
    except (RuntimeError, IndexError):
        return None


FAMILY = register(
    Family(
        name="cosine",
        title="Cosine similarity",
        description="The tutorial's custom cosine-similarity loss: y = x1·x2 / (‖x1‖‖x2‖) along dim, "
        "loss = mean(1 − y).",
        input_names=("x1", "x2"),
        reference=cosine_reference,
        formulas={
            "tutorial": Formula(
                "tutorial",
                TutorialFunction.apply,
                "As published: sign flipped, normalisation missing, backward reduces over dim=-1.",
                r"\nabla_{x_1} = -\,g\,\big(x_2 - (x_1\cdot x_2)\,x_1\big)",
                correct=False,
            ),
            "sign-fixed": Formula(
                "sign-fixed",
                SignFixedFunction.apply,
                "Sign corrected only: right for unit-norm inputs, wrong in size otherwise.",
                r"\nabla_{x_1} = g\,\big(x_2 - (x_1\cdot x_2)\,x_1\big)",
                correct=False,
            ),
            "norm-fixed": Formula(
                "norm-fixed",
                NormFixedFunction.apply,
                "Normalisation added only: exactly minus the true gradient.",
                r"\nabla_{x_1} = -\,\frac{g}{\lVert x_1\rVert}\big(\hat x_2 - (\hat x_1\cdot\hat x_2)\,\hat x_1\big)",
                correct=False,
            ),
            "sign+norm-fixed": Formula(
                "sign+norm-fixed",
                SignAndNormFixedFunction.apply,
                "Both fixed, tutorial style: right for 2-D inputs, still reduces over dim=-1.",
                r"\nabla_{x_1} = \frac{g}{\lVert x_1\rVert}\big(\hat x_2 - (\hat x_1\cdot\hat x_2)\,\hat x_1\big)",
                correct=False,
            ),
            "corrected": Formula(
                "corrected",
                CosineSimilarityFunction.apply,
                "Correct for every shape, dim, broadcast and eps; double backward, jvp and vmap.",
                r"\nabla_{x_1} = g\,\Big(\frac{x_2}{c_1 c_2} - \frac{y\,x_1}{c_1\,\lVert x_1\rVert}\Big),"
                r"\quad c_i = \max(\lVert x_i\rVert, \varepsilon)",
                correct=True,
            ),
        },
        build_inputs=build_inputs,
        loss=cosine_loss,
        params={"dim": 1, "eps": 1e-8},
        forward_latex=r"y = \frac{x_1\cdot x_2}{\max(\lVert x_1\rVert,\varepsilon)\,\max(\lVert x_2\rVert,\varepsilon)}",
        gradient_latex=r"\frac{\partial y}{\partial x_1} = \frac{x_2}{c_1 c_2} - \frac{y\,x_1}{c_1\,\lVert x_1\rVert}",
        target=cosine_target,
        specimen=_annotated_specimen(),
        broadcast=True,
        notes={
            "training": "x1 is pulled towards x2's direction. The loss is 1 − similarity, so its curve is the "
            "similarity between x1 and x2 upside down (0: aligned, 1: orthogonal, 2: opposite).",
            "field": "A correct formula's arrows head down the loss towards the ★ (x2's direction); the tutorial's point away from it.",
            "sweep:input norm": "Every row of both inputs rescaled to the same norm. A formula that forgot the 1/(‖x1‖‖x2‖) "
            "normalisation is right only at unit norm: there its error dips to ~0 and grows away from it on both sides. "
            "A formula with only a flipped sign has cosine −1 everywhere; the tutorial, with both bugs, is exactly "
            "flipped at unit norm (cosine −1, error twice the gradient).",
            "sweep:eps": "eps matters only for rows whose norm is below it: with rows drawn at norm ≈ √features, the error "
            "is flat until eps passes the row norms, and then shows which formulas clamp the way PyTorch does. Add "
            "near-zero rows in the sidebar (Perturbations) to see eps bite at small values too; they sit at a multiple "
            "of eps, so they move with it.",
            "sweep:near-zero norm": "Every row of x1 shrunk to a tiny norm around eps. Below 1 (norm < eps) PyTorch clamps "
            "the norm in the forward; a formula that normalises differently shows a jump there. Read the relative "
            "error: the gradients themselves are huge (≈ 1/norm).",
            "sweep:angle": "x2 turned to a given angle from x1, row by row (0°: parallel, 180°: antiparallel). A sign error "
            "shows as cosine −1 at every angle. Without the normalisation, the tutorial's projection term, "
            "(x1·x2)·x1, swamps its gradient except near 90°, where x1·x2 = 0 and it is merely flipped. At 0° and "
            "180° the true gradient vanishes (the similarity is at its extreme), so every formula's relative error "
            "and cosine there are round-off.",
        },
    )
)
