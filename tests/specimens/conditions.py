"""A zoo for the conditions (``lib.engine.conditions``): custom autograd Functions whose backward is
right where the plain verdict calls it (every input requires a gradient, a fresh dense
grad_output, distinct contiguous inputs that never tie) and wrong under exactly one family of
conditions, each re-created in our own words from a kind of bug seen in public code; and correct
controls that must pass every condition (four are the other collections' own, imported: the product
``contracts.Good``, the corpus's ``LinearFunction``, ``zoo.Abs`` and ``zoo.RowMax``).

Each specimen names the condition the verdict must name (``condition``: the first one that
raises, else the first one that fails, in the order the engine runs them), every condition that
fails (``fails``), and the exception's type where one is raised (``raises``). Controls have
``condition=None``. Nothing here knows about Gradient Lab: plain PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from tests.specimens.contracts import Good
from tests.specimens.corpus.functions import LinearFunction
from tests.specimens.zoo import Abs, RowMax, Square

Tensor = torch.Tensor

# the engine's condition names (lib.engine.conditions), as the verdict names them
ONLY_X1 = "only x1 requires a gradient"
ONLY_X2 = "only x2 requires a gradient"
SHARED = "another consumer shares grad_output"
EXPANDED = "grad_output is expanded (stride 0, as .sum() makes it)"
GRAD_TRANSPOSED = "grad_output is transposed"
GRAD_SLICED = "grad_output is a strided view at an offset"
INPUTS_TRANSPOSED = "the inputs are transposed"
INPUTS_SLICED = "the inputs are strided views at an offset"
ALIASED = "the same tensor is passed as x1 and x2"
EMPTY = "the batch is empty"
ONE_ROW = "the batch has one row"
TIES = "inputs tie and sit on kinks"


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


# ==== requires_grad: ctx.needs_input_grad ===========================================================


class ProductUnboundWhenAlone(torch.autograd.Function):
    """a·b whose backward binds a's gradient only inside a's needs_input_grad branch, and returns
    it unconditionally: UnboundLocalError when only b needs a gradient."""

    # a wavelet package's product node: the variable for a's gradient is only assigned in its branch
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            grad_a = g * b
        grad_b = g * a if ctx.needs_input_grad[1] else None
        return grad_a, grad_b  # noqa: F821 - unbound when only b needs a gradient: the bug


class ProductGradNeedsTheOther(torch.autograd.Function):
    """a·b whose backward computes a's gradient only when b needs one too (the two branches were
    merged under ``all(ctx.needs_input_grad)``): when only a needs a gradient, it gets None, which
    autograd reads as zeros."""

    # a fused kernel's backward: "compute both or neither", gating a's gradient on b's flag
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        both = ctx.needs_input_grad[0] and ctx.needs_input_grad[1]
        grad_a = g * b if both else None
        grad_b = g * a if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


class LinearWeightGradInBiasBranch(torch.autograd.Function):
    """x·Wᵀ + b whose weight gradient sits (by indentation) inside the bias's branch: unbound
    whenever the weight needs a gradient and the bias does not."""

    # the "Extending PyTorch" LinearFunction with the weight's lines indented one level too deep
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return x.mm(weight.t()) + bias

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        grad_x = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = g.mm(weight)
        if ctx.needs_input_grad[2]:
            grad_bias = g.sum(0)
            if ctx.needs_input_grad[1]:
                grad_weight = g.t().mm(x)
        return grad_x, grad_weight if ctx.needs_input_grad[1] else None, grad_bias  # noqa: F821


# ==== grad_output's layout ===========================================================================


class SquareTiledByFour(Square):
    """x², its backward run over rows in tiles of 4 that forgets the remainder: rows past the last
    whole tile get no gradient. Right at 8 rows (where gradcheck runs it), wrong at 7 and 9. The
    kind of kernel bug fixed for sizes one past a tile or off a power of two (issue #39)."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        grad = 2 * x * g
        grad[(x.shape[0] // 4) * 4:] = 0
        return grad


class SquareReadsGradAsRowMajor(torch.autograd.Function):
    """x² whose backward reads grad_output's memory as if it were row-major
    (``as_strided`` with contiguous strides): out of bounds on an expanded (stride-0) grad_output,
    the wrong numbers on a transposed or sliced one."""

    # hand-written CUDA extensions that take grad.data_ptr() and index it as a dense row-major array
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        dense = g.as_strided(g.shape, _contiguous_strides(g.shape))
        return 2 * x * dense


class SquareStrideZeroMeansOnes(torch.autograd.Function):
    """x² with a "fast path" for a stride-0 grad_output that assumes it came from ``.sum()`` and is
    all ones: ``y.sum() * 3`` (or ``y.sum() / n``) hands it a stride-0 grad_output of 3s (or 1/n)."""

    # an "optimisation" that special-cases broadcast grads as the loss.sum() they usually are
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if g.dim() and 0 in g.stride():
            return 2 * x  # the bug: right only for an upstream of ones
        return 2 * x * g


class SquareFillsThroughFlatView(torch.autograd.Function):
    """x² whose backward allocates its result like grad_output (``empty_like`` keeps a transposed
    layout) and fills it through ``.view(-1)``, assuming it is contiguous: RuntimeError when
    grad_output is transposed (an expanded or sliced one gives a contiguous ``empty_like``)."""

    # kernels that allocate with empty_like(grad) and then write through a flat view of it
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        out = torch.empty_like(g)
        out.view(-1).copy_((2 * x * g).reshape(-1))
        return out


class SquareColumnMajorFastPath(torch.autograd.Function):
    """x² (square inputs) whose backward has a fast path for a column-major grad_output that makes
    it row-major by ``.mT.contiguous()`` and forgets to transpose it back: the transpose of the
    right gradient, with the same shape, when grad_output is transposed."""

    # a layout fast path in a matrix op's backward, silent for square shapes
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if g.dim() == 2 and not g.is_contiguous() and g.mT.is_contiguous():
            g = g.mT.contiguous()  # the bug: still transposed
        return 2 * x * g


class SquareForgetsGradOffset(torch.autograd.Function):
    """x² whose backward rebuilds grad_output from its storage and strides but not its storage
    offset: the wrong numbers only for a view that does not start at its storage's first element."""

    # extensions that pass (storage pointer, strides) to a kernel and drop storage_offset
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        rebuilt = torch.as_strided(g, g.shape, g.stride(), 0)
        return 2 * x * rebuilt


class SquareReusesGradBuffer(torch.autograd.Function):
    """x² whose backward, to save memory, writes its result into grad_output when that is
    contiguous (``g.mul_``): the right numbers, but every other consumer of grad_output then reads
    the corrupted gradient."""

    # "reuse grad_output's buffer" memory optimisations in fused layers' backward
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if g.is_contiguous():
            return g.mul_(2 * x)  # the bug: grad_output is not the backward's to write
        return g * (2 * x)


class SquareContiguousFirst(torch.autograd.Function):
    """Control: x² whose backward calls ``.contiguous()`` on grad_output and its saved input
    before the flat-view tricks: right in every layout."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        g, x = g.contiguous(), x.contiguous()
        return (2 * x.view(-1) * g.view(-1)).view(x.shape)


class SquareClonesBeforeInPlace(torch.autograd.Function):
    """Control: x² whose backward works in place on its own copy of grad_output."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.clone().mul_(2 * x)


class IdentityPassesGradOn(torch.autograd.Function):
    """Control: the identity, whose backward hands grad_output on as it is (whatever its layout)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g


# ==== the inputs' layout ================================================================================


class SquareFlattensSavedInput(torch.autograd.Function):
    """x² whose backward flattens its saved input with ``.view(-1)``: RuntimeError when the input
    is transposed (a uniformly strided view, as ``x[..., 1::2]``, still flattens)."""

    # backward passes that flatten saved activations with view(-1) instead of reshape(-1)
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (2 * x.view(-1) * g.reshape(-1)).view(g.shape)


class SquareForgetsInputOffset(torch.autograd.Function):
    """x² whose backward rebuilds its saved input from storage and strides, dropping the storage
    offset: the wrong numbers only for an input that is a view at an offset (``x[..., 1::2]``)."""

    # extensions that hand a kernel x's storage and strides but not x.storage_offset()
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        rebuilt = torch.as_strided(x, x.shape, x.stride(), 0)
        return 2 * rebuilt * g


# ==== aliasing: f(x, x) ===================================================================================


class ProductNegatesInPlace(torch.autograd.Function):
    """a·b whose backward negates its saved a in place (a kernel wanted −a), reads b, and restores
    a: harmless for distinct inputs (a is restored exactly), but when a is b, b's gradient reads the
    negated values: f(x, x) gets 0 where 2·x·g is due."""

    # backward passes that borrow a saved input's buffer as scratch space and put it back after
    @staticmethod
    def forward(ctx, a, b):
        ctx.a, ctx.b = a, b  # kept on ctx (no version check), as older extensions do
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.a, ctx.b
        a.neg_()
        grad_b = -(g * a)
        grad_a = g * b  # the bug: b is a, still negated, when the same tensor is passed twice
        a.neg_()
        return grad_a, grad_b


class ProductSavesCopies(torch.autograd.Function):
    """Control: the same scratch trick on a copy of a: right whether or not a is b."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        scratch = a.clone().neg_()
        return g * b, -(g * scratch)


# ==== sizes: an empty batch, a batch of one ================================================================


class SquareRowByRow(torch.autograd.Function):
    """x² whose backward loops over the batch's rows and stacks their gradients: ``torch.stack``
    of no rows raises on an empty batch."""

    # per-sample loops in backward (per-example gradient code) that torch.stack their rows
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.stack([2 * x[i] * g[i] for i in range(x.shape[0])])


class RowSquaredNormSqueezes(torch.autograd.Function):
    """y = Σⱼ xᵢⱼ² per row, whose backward ends with ``.squeeze()`` (meant for a trailing size-1
    dimension): on a batch of one it drops the batch dimension too, and autograd rejects the
    gradient's shape."""

    # squeeze() without a dim in a backward, the classic batch-of-one shape bug
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * x).sum(-1)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (2 * x * g.unsqueeze(-1)).squeeze()


class RowSquaredNormRight(torch.autograd.Function):
    """Control: y = Σⱼ xᵢⱼ² per row, vectorised: right for any batch, empty or of one."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * x).sum(-1)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g.unsqueeze(-1)


class SinCosNeedsTheFirst(torch.autograd.Function):
    """(sin x, cos x) whose backward, with grad_outputs left undefined where unused, returns no
    gradient unless sin's is defined: right when both outputs are used, wrong when only cos is."""

    # a multi-output backward that tests only its first grad_output for None (set_materialize_grads(False)), as in fused kernels
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, g_sin, g_cos):
        (x,) = ctx.saved_tensors
        if g_sin is None:
            return None
        return g_sin * x.cos() - (g_cos * x.sin() if g_cos is not None else 0)


# ==== ties and kinks =======================================================================================


class RowMaxGivesEveryTie(torch.autograd.Function):
    """Max over each row whose backward gives the whole gradient to every element equal to the max:
    each entry is 0 or 1 (a valid one-sided derivative alone), but a tied group's shares add up to
    its size, not 1."""

    # max-pooling backward written as a mask (x == max), found in many hand-written pooling layers
    @staticmethod
    def forward(ctx, x):
        y = x.amax(-1)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g.unsqueeze(-1) * (x == y.unsqueeze(-1)).to(g.dtype)


class RowMaxSplitsTies(torch.autograd.Function):
    """Control: max over each row whose backward splits the gradient evenly over the tied maxima
    (what ``amax`` does)."""

    @staticmethod
    def forward(ctx, x):
        y = x.amax(-1)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        mask = (x == y.unsqueeze(-1)).to(g.dtype)
        return g.unsqueeze(-1) * mask / mask.sum(-1, keepdim=True)


class AbsDividesByItself(torch.autograd.Function):
    """|x| whose backward is x/|x|: NaN at x = 0, where any value in [−1, 1] would do."""

    # |x|'s derivative written as x / |x| (seen in hand-written L1 penalties)
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.abs()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x / x.abs()


class ReluOneAtZero(torch.autograd.Function):
    """Control: ReLU whose backward takes the right-hand slope 1 at x = 0 (autograd takes 0): both
    are valid one-sided derivatives."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x >= 0).to(g.dtype)


class SortByNumpy(torch.autograd.Function):
    """Control: a sort along the last dim by NumPy's argsort, whose backward scatters grad_output
    back through the inverse permutation. At a tie its order may differ from ``torch.sort``'s;
    both are valid (each tied element's gradient is one of its one-sided derivatives, and the
    shares of a tied group add up)."""

    # the PyTorch docs' "Extending torch.func with autograd.Function" NumpySort, in our own words
    @staticmethod
    def forward(ctx, x):
        order = torch.from_numpy(np.argsort(x.detach().numpy(), axis=-1, kind="stable")[..., ::-1].copy())  # ties: last index first
        ctx.save_for_backward(order)
        return x.gather(-1, order).flip(-1)

    @staticmethod
    def backward(ctx, g):
        (order,) = ctx.saved_tensors
        return torch.zeros_like(g).scatter(-1, order, g.flip(-1))


class SortMatchesValues(torch.autograd.Function):
    """A sort whose backward finds each element's place by its value (the first sorted position
    equal to it): tied elements all take the same position's gradient, and the other tied
    position's is lost."""

    # gradients routed by value lookup (searchsorted on the sorted values), seen in hand-written rank losses
    @staticmethod
    def forward(ctx, x):
        y = x.sort(-1).values
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        place = torch.searchsorted(y.contiguous(), x.contiguous())
        return g.gather(-1, place)


# ==== the specimens ===========================================================================================


def normal(*shapes: tuple[int, ...], seed: int = 0) -> Callable[[], tuple[Tensor, ...]]:
    """Inputs of these shapes, standard normal, float64, seeded: distinct, contiguous, untied."""
    def build() -> tuple[Tensor, ...]:
        generator = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(shape, generator=generator, dtype=torch.float64) for shape in shapes)
    return build


@dataclass(frozen=True)
class Specimen:
    name: str
    function: Callable[..., Tensor]
    inputs: Callable[[], tuple[Tensor, ...]]
    reference: Callable[..., Tensor] | None
    condition: str | None  # the condition the verdict names; None: a control, that passes every condition
    raises: str | None = None  # the exception's type under ``condition``; None: the wrong numbers
    fails: tuple[str, ...] = ()  # every condition that fails (``condition`` alone where empty)
    group: str = ""  # the conditions' group (lib.engine.conditions.GROUPS) every failure is in
    missed: str = ""  # the engine misses this bug (its test is an expected failure): why

    @property
    def failing(self) -> tuple[str, ...]:
        return self.fails or ((self.condition,) if self.condition else ())


def product(a, b):
    return a * b


def linear(x, weight, bias):
    return x.mm(weight.t()) + bias


def square(x):
    return x * x


def row_squared_norm(x):
    return (x * x).sum(-1)


def row_max(x):
    return x.amax(-1)


def absolute(x):
    return x.abs()


def relu(x):
    return x.clamp(min=0)


def sort(x):
    return x.sort(-1).values


def identity(x):
    return x.clone()


PAIR, MATRIX, LINEAR = normal((6, 5), (6, 5)), normal((6, 5)), normal((6, 4), (3, 4), (3,))
TIED = normal((6, 5), seed=1)  # rounded to the ties condition's grid, rows 0 and 1 of its first four tie at their maximum

BROKEN = (
    Specimen("unbound when only x2 needs a gradient", ProductUnboundWhenAlone.apply, PAIR, product, ONLY_X2, "UnboundLocalError",
             group="requires_grad"),
    Specimen("x1's gradient needs x2's", ProductGradNeedsTheOther.apply, PAIR, product, ONLY_X1, group="requires_grad"),
    Specimen("linear weight gradient in the bias branch", LinearWeightGradInBiasBranch.apply, LINEAR, linear, ONLY_X2,
             "UnboundLocalError", fails=(ONLY_X2, "x3 does not require a gradient"), group="requires_grad"),
    Specimen("grad_output read as row-major", SquareReadsGradAsRowMajor.apply, MATRIX, square, EXPANDED, "RuntimeError",
             fails=(EXPANDED, GRAD_TRANSPOSED, GRAD_SLICED), group="grad_output"),
    Specimen("stride 0 taken for ones", SquareStrideZeroMeansOnes.apply, MATRIX, square, EXPANDED, group="grad_output"),
    Specimen("result filled through a flat view", SquareFillsThroughFlatView.apply, MATRIX, square, GRAD_TRANSPOSED, "RuntimeError",
             group="grad_output"),
    Specimen("column-major fast path", SquareColumnMajorFastPath.apply, normal((5, 5)), square, GRAD_TRANSPOSED, group="grad_output"),
    Specimen("grad_output's storage offset dropped", SquareForgetsGradOffset.apply, MATRIX, square, GRAD_SLICED, group="grad_output"),
    Specimen("result written into grad_output", SquareReusesGradBuffer.apply, MATRIX, square, SHARED, group="grad_output"),
    Specimen("saved input flattened by view", SquareFlattensSavedInput.apply, MATRIX, square, INPUTS_TRANSPOSED, "RuntimeError",
             group="inputs"),
    Specimen("saved input's storage offset dropped", SquareForgetsInputOffset.apply, MATRIX, square, INPUTS_SLICED, group="inputs"),
    Specimen("saved input negated in place", ProductNegatesInPlace.apply, PAIR, product, ALIASED, group="aliasing"),
    Specimen("rows stacked", SquareRowByRow.apply, MATRIX, square, EMPTY, "RuntimeError", group="size"),
    Specimen("squeeze drops the batch", RowSquaredNormSqueezes.apply, MATRIX, row_squared_norm, ONE_ROW, "RuntimeError",
             group="size"),
    Specimen("every tied max gets the gradient", RowMaxGivesEveryTie.apply, TIED, row_max, TIES, group="ties"),
    Specimen("every tied max gets the gradient, no tie drawn", RowMaxGivesEveryTie.apply, MATRIX, row_max, TIES, group="ties"),
    Specimen("|x|' as x/|x|", AbsDividesByItself.apply, MATRIX, absolute, TIES, group="ties"),
    Specimen("sort routes gradients by value", SortMatchesValues.apply, TIED, sort, TIES, group="ties"),
)

CONTROLS = (
    Specimen("product gated right", Good.apply, PAIR, product, None),
    Specimen("linear gated right", LinearFunction.apply, LINEAR, linear, None),
    Specimen("contiguous first", SquareContiguousFirst.apply, MATRIX, square, None),
    Specimen("in place on a copy", SquareClonesBeforeInPlace.apply, MATRIX, square, None),
    Specimen("identity passes grad_output on", IdentityPassesGradOn.apply, MATRIX, identity, None),
    Specimen("scratch on a copy", ProductSavesCopies.apply, PAIR, product, None),
    Specimen("row norm vectorised", RowSquaredNormRight.apply, MATRIX, row_squared_norm, None),
    Specimen("max splits ties", RowMaxSplitsTies.apply, TIED, row_max, None),
    Specimen("max picks the first", RowMax.apply, TIED, row_max, None),
    Specimen("|x|' as sign(x)", Abs.apply, MATRIX, absolute, None),
    Specimen("relu 1 at 0", ReluOneAtZero.apply, MATRIX, relu, None),
    Specimen("sort by NumPy's argsort", SortByNumpy.apply, TIED, sort, None),
)

SPECIMENS = BROKEN + CONTROLS
