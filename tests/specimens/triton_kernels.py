"""Triton kernels written for the tests, wrapped as ``torch.autograd.Function``s: right ones and ones
with planted bugs, each row-wise over the last dim (or elementwise), computing in float32 whatever
dtype they are given, as real fused kernels do.

- softmax: ``RowSoftmax`` right; ``RowSoftmaxMissingTerm`` and ``RowSoftmaxLastRowUnscaled`` wrong;
- RMSNorm with a weight: ``RMSNorm`` right; ``RMSNormWeightGradTwice`` wrong (dw doubled);
- SwiGLU: ``SwiGLU`` right; ``SwiGLUInPlace`` right maths, written into its saved inputs;
- square: ``Square`` right in float32; ``SquareFloat64Refused`` refuses float64 in its backward.

The references are plain torch ops (``softmax_reference``, ``rmsnorm_reference``,
``swiglu_reference``, ``square_reference``), and the module declares one family per group for the
command line and the dashboard. Import it only where triton is importable (the tests
``pytest.importorskip("triton")`` first).
"""

from __future__ import annotations

import os

# Without a GPU the kernels run under Triton's interpreter, on CPU tensors. The switch is read when
# a kernel is defined (``@triton.jit``), so it must be set before triton is imported; an explicit
# TRITON_INTERPRET=0 (a GPU machine) is left as it is.
os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from gradient_lab import declare  # noqa: E402
from gradient_lab.app.functions.common import weighted_sum  # noqa: E402

Tensor = torch.Tensor

__all__ = [
    "RMSNorm", "RMSNormWeightGradTwice", "RowSoftmax", "RowSoftmaxLastRowUnscaled", "RowSoftmaxMissingTerm", "Square",
    "SquareFloat64Refused", "SwiGLU", "SwiGLUInPlace", "rmsnorm_reference", "softmax_reference", "square_reference",
    "swiglu_reference",
]


# ---------------------------------------------------------------------------------------------------
# launching: 2-D views over rows, one program per row, BLOCK a power of two ≥ the row's length


def _rows(x: Tensor) -> Tensor:
    """``x`` as contiguous rows over its last dim: (rows, cols)."""
    return x.reshape(-1, x.shape[-1] if x.dim() else 1).contiguous()


def _block(n_cols: int) -> int:
    return triton.next_power_of_2(max(n_cols, 1))


def _launch(kernel, rows: int, *args, **meta) -> None:
    """One program per row; nothing to launch for no rows (a grid of 0 programs)."""
    if rows > 0:
        kernel[(rows,)](*args, **meta)


# ---------------------------------------------------------------------------------------------------
# 1. softmax over rows: y = softmax(x); dx = y * (g - sum(g * y))


@triton.jit
def _softmax_forward(X, Y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    e = tl.where(mask, e, 0.0)
    y = e / tl.sum(e, axis=0)
    tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward(Y, G, DX, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(Y + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    dx = y * (g - tl.sum(g * y, axis=0))
    tl.store(DX + row * n_cols + cols, dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward_missing_term(Y, G, DX, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(Y + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    dx = y * g  # BUG: the - sum(g * y) term is missing
    tl.store(DX + row * n_cols + cols, dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward_last_row_unscaled(Y, G, DX, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(Y + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    centred = g - tl.sum(g * y, axis=0)
    scale = tl.where(row == n_rows - 1, 1.0, y)  # BUG: the last row is not multiplied by y
    dx = scale * centred
    tl.store(DX + row * n_cols + cols, dx.to(DX.dtype.element_ty), mask=mask)


class RowSoftmax(torch.autograd.Function):
    """Right: y = softmax(x) over the last dim; dx = y * (g - sum(g * y)), in float32 inside the kernels.
    The shape of the fused softmax kernels in Triton's tutorials and in Liger-Kernel, one program a row."""

    @staticmethod
    def forward(ctx, x):
        x2 = _rows(x)
        y = torch.empty_like(x2)
        _launch(_softmax_forward, x2.shape[0], x2, y, x2.shape[1], BLOCK=_block(x2.shape[1]))
        ctx.save_for_backward(y)
        return y.view(x.shape)

    @classmethod
    def backward(cls, ctx, grad_output):
        (y,) = ctx.saved_tensors
        g = _rows(grad_output)
        dx = torch.empty_like(y)
        cls._backward(y, g, dx)  # the backward kernel: each planted bug's class launches its own
        return dx.view(grad_output.shape)

    @staticmethod
    def _backward(y: Tensor, g: Tensor, dx: Tensor) -> None:
        _launch(_softmax_backward, y.shape[0], y, g, dx, y.shape[1], BLOCK=_block(y.shape[1]))


class RowSoftmaxMissingTerm(RowSoftmax):
    """Planted bug: dx = y * g, the - sum(g * y) term dropped, as if the normalising sum did not depend on x
    (the classic slip in a hand-written softmax backward)."""

    @staticmethod
    def _backward(y: Tensor, g: Tensor, dx: Tensor) -> None:
        _launch(_softmax_backward_missing_term, y.shape[0], y, g, dx, y.shape[1], BLOCK=_block(y.shape[1]))


class RowSoftmaxLastRowUnscaled(RowSoftmax):
    """Planted bug: the last row's dx is (g - sum(g * y)), its multiplication by y forgotten: one program's
    branch wrong, every other row right (a bug only a check of every row finds)."""

    @staticmethod
    def _backward(y: Tensor, g: Tensor, dx: Tensor) -> None:
        _launch(_softmax_backward_last_row_unscaled, y.shape[0], y, g, dx, y.shape[0], y.shape[1], BLOCK=_block(y.shape[1]))


def softmax_reference(x: Tensor) -> Tensor:
    """Ground truth: ``torch.softmax`` over the last dim, by autograd."""
    return torch.softmax(x, dim=-1)


# ---------------------------------------------------------------------------------------------------
# 2. RMSNorm with a weight: y = x * r * w, r = 1 / sqrt(mean(x²) + eps)
#    dx = r * (g * w) - x * r³ * mean(g * w * x);  dw = sum over rows of g * x * r


@triton.jit
def _rmsnorm_forward(X, W, Y, R, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(R + row, r)
    tl.store(Y + row * n_cols + cols, (x * r * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_backward(X, W, R, G, DX, DW_ROWS, n_cols, DW_FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(R + row)
    gw = g * w
    dx = r * gw - x * (r * r * r) * (tl.sum(gw * x, axis=0) / n_cols)
    tl.store(DX + row * n_cols + cols, dx.to(DX.dtype.element_ty), mask=mask)
    # this row's share of dw, in float32; the rows' shares are summed outside the kernel (as Liger-Kernel does)
    tl.store(DW_ROWS + row * n_cols + cols, DW_FACTOR * g * x * r, mask=mask)


class RMSNorm(torch.autograd.Function):
    """Right: y = x * rsqrt(mean(x²) + eps) * w over the last dim, w of shape (cols,); backward for x and w,
    in float32 inside the kernels, dw from per-row partial sums added up afterwards (the layout of
    Liger-Kernel's RMSNorm, written afresh here)."""

    DW_FACTOR = 1.0

    @staticmethod
    def forward(ctx, x, w, eps=1e-6):
        x2 = _rows(x)
        w = w.contiguous()
        y = torch.empty_like(x2)
        r = torch.empty(x2.shape[0], dtype=torch.float32, device=x.device)
        _launch(_rmsnorm_forward, x2.shape[0], x2, w, y, r, x2.shape[1], float(eps), BLOCK=_block(x2.shape[1]))
        ctx.save_for_backward(x2, w, r)
        ctx.shape = x.shape
        return y.view(x.shape)

    @classmethod
    def backward(cls, ctx, grad_output):
        x2, w, r = ctx.saved_tensors
        g = _rows(grad_output)
        dx = torch.empty_like(x2)
        dw_rows = torch.empty(x2.shape, dtype=torch.float32, device=x2.device)
        _launch(_rmsnorm_backward, x2.shape[0], x2, w, r, g, dx, dw_rows, x2.shape[1], DW_FACTOR=cls.DW_FACTOR,
                BLOCK=_block(x2.shape[1]))
        dw = dw_rows.sum(dim=0).to(w.dtype)
        return dx.view(ctx.shape), dw, None


class RMSNormWeightGradTwice(RMSNorm):
    """Planted bug: dw doubled (a factor of 2 on one input's gradient, dx right), as a partial sum
    added twice would be."""

    DW_FACTOR = 2.0  # BUG: the kernel writes 2 * g * x * r as each row's share of dw


def rmsnorm_reference(x: Tensor, w: Tensor, eps: float = 1e-6) -> Tensor:
    """Ground truth: x * rsqrt(mean(x²) + eps) * w over the last dim, plain torch ops, by autograd."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def input_and_weight(shape, *, seed=0, dtype=torch.float64, device="cpu", **_params):
    """x standard normal of ``shape``; w of shape (cols,), normal around 1 as a trained norm's weight."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(tuple(shape), generator=generator, dtype=torch.float64)
    w = 1.0 + 0.5 * torch.randn((shape[-1],), generator=generator, dtype=torch.float64)
    return x.to(dtype=dtype, device=device), w.to(dtype=dtype, device=device)


# ---------------------------------------------------------------------------------------------------
# 3. SwiGLU: out = silu(a) * b;  da = g * b * s * (1 + a * (1 - s)), db = g * a * s, s = sigmoid(a)


@triton.jit
def _swiglu_forward(A, B, OUT, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    a = tl.load(A + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    s = 1.0 / (1.0 + tl.exp(-a))
    tl.store(OUT + row * n_cols + cols, (a * s * b).to(OUT.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_backward(A, B, G, DA, DB, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    a = tl.load(A + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    s = 1.0 / (1.0 + tl.exp(-a))
    da = g * b * s * (1.0 + a * (1.0 - s))
    db = g * a * s
    tl.store(DA + row * n_cols + cols, da.to(DA.dtype.element_ty), mask=mask)  # DA may be A itself: a is loaded above
    tl.store(DB + row * n_cols + cols, db.to(DB.dtype.element_ty), mask=mask)


class SwiGLU(torch.autograd.Function):
    """Right: out = silu(a) * b, a and b of the same shape; backward da, db into fresh tensors, in float32
    inside the kernels."""

    @staticmethod
    def forward(ctx, a, b):
        a2, b2 = _rows(a), _rows(b)
        out = torch.empty_like(a2)
        _launch(_swiglu_forward, a2.shape[0], a2, b2, out, a2.shape[1], BLOCK=_block(a2.shape[1]))
        ctx.save_for_backward(a2, b2)
        ctx.shape = a.shape
        return out.view(a.shape)

    @staticmethod
    def backward(ctx, grad_output):
        a2, b2 = ctx.saved_tensors
        g = _rows(grad_output)
        da, db = torch.empty_like(a2), torch.empty_like(b2)
        _launch(_swiglu_backward, a2.shape[0], a2, b2, g, da, db, a2.shape[1], BLOCK=_block(a2.shape[1]))
        return da.view(ctx.shape), db.view(ctx.shape)


class SwiGLUInPlace(SwiGLU):
    """Right maths, written in place: the backward stores da and db INTO the saved inputs a and b and returns
    them, a write autograd cannot see (no version bump through a kernel's pointers). After Liger-Kernel's
    SwiGLU, which reuses its saved inputs' memory for the gradients: a second backward, or anyone still
    holding a and b, reads gradients where the inputs were."""

    @staticmethod
    def backward(ctx, grad_output):
        a2, b2 = ctx.saved_tensors
        g = _rows(grad_output)
        # BUG (by design, as Liger's): the gradients overwrite the saved inputs, which are the caller's a and b
        _launch(_swiglu_backward, a2.shape[0], a2, b2, g, a2, b2, a2.shape[1], BLOCK=_block(a2.shape[1]))
        return a2.view(ctx.shape), b2.view(ctx.shape)


def swiglu_reference(a: Tensor, b: Tensor) -> Tensor:
    """Ground truth: ``F.silu(a) * b``, by autograd."""
    return torch.nn.functional.silu(a) * b


# ---------------------------------------------------------------------------------------------------
# 4. square, elementwise: y = x², dx = 2 * x * g, in float32 whatever the input's dtype

SQUARE_BLOCK = 128

# the dtypes a kernel is compiled for; float64 left out, as Liger-Kernel's tables of torch to triton dtypes do
_TRITON_DTYPES = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


@triton.jit
def _square_forward(X, Y, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + offsets, (x * x).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _square_backward(X, G, DX, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(DX + offsets, (2.0 * x * g).to(DX.dtype.element_ty), mask=mask)


def _blocks(n: int) -> int:
    return triton.cdiv(n, SQUARE_BLOCK)


class Square(torch.autograd.Function):
    """Right: y = x², dx = 2 * x * g, elementwise, in float32 inside the kernels on any input dtype (a float64
    input gets float32-accurate values back in float64)."""

    @staticmethod
    def forward(ctx, x):
        x1 = x.contiguous()
        y = torch.empty_like(x1)
        if x1.numel():
            _square_forward[(_blocks(x1.numel()),)](x1, y, x1.numel(), BLOCK=SQUARE_BLOCK)
        ctx.save_for_backward(x1)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (x1,) = ctx.saved_tensors
        g = grad_output.contiguous()
        dx = torch.empty_like(x1)
        if x1.numel():
            _square_backward[(_blocks(x1.numel()),)](x1, g, dx, x1.numel(), BLOCK=SQUARE_BLOCK)
        return dx


class SquareFloat64Refused(Square):
    """As ``Square``, but its backward refuses float64: it looks the input's dtype up in a table of the dtypes it
    compiles for and raises ``KeyError(torch.float64)``, as Liger-Kernel's RMSNorm backward does; the way to
    tell a kernel's native precision from its refusal."""

    @staticmethod
    def backward(ctx, grad_output):
        (x1,) = ctx.saved_tensors
        _TRITON_DTYPES[x1.dtype]  # KeyError(torch.float64) for a float64 input
        return Square.backward(ctx, grad_output)


def square_reference(x: Tensor) -> Tensor:
    """Ground truth: ``x * x``, by autograd."""
    return x * x


# ---------------------------------------------------------------------------------------------------
# the families, for ``gradient-lab check tests/specimens/triton_kernels.py`` and the dashboard

declare(
    "triton softmax",
    {"right": RowSoftmax, "missing term": RowSoftmaxMissingTerm, "last row unscaled": RowSoftmaxLastRowUnscaled},
    reference=softmax_reference,
    correct=("right",),
    loss=weighted_sum,  # softmax's rows sum to 1: a plain sum's gradient is zero, a weighted one moves every element
    order=1,
    kernel=True,
    title="Row softmax (Triton kernels)",
    latex={"forward": r"y = \operatorname{softmax}(x)", "gradient": r"\nabla_x = y \odot \big(g - \textstyle\sum_j g_j y_j\big)",
           "right": r"y \odot \big(g - \textstyle\sum_j g_j y_j\big)", "missing term": r"y \odot g",
           "last row unscaled": r"g - \textstyle\sum_j g_j y_j\ \text{on the last row}"},
)

declare(
    "triton rmsnorm",
    {"right": RMSNorm, "weight grad twice": RMSNormWeightGradTwice},
    reference=rmsnorm_reference,
    inputs=("x", "w"),
    correct=("right",),
    build_inputs=input_and_weight,
    loss=weighted_sum,
    params={"eps": 1e-6},
    order=1,
    batch_dims=(0, None),  # x's rows are a batch, w is kept whole
    kernel=True,
    title="RMSNorm with a weight (Triton kernels)",
    latex={"forward": r"y = x\,r\,w,\quad r = 1/\sqrt{\overline{x^2} + \varepsilon}",
           "gradient": r"\nabla_x = r\,(g \odot w) - x\,r^3\,\overline{g \odot w \odot x},\quad \nabla_w = \textstyle\sum_{\text{rows}} g \odot x\,r"},
)

declare(
    "triton swiglu",
    {"right": SwiGLU, "in place": SwiGLUInPlace},
    reference=swiglu_reference,
    inputs=("a", "b"),
    correct=("right", "in place"),  # as Liger-Kernel's: a right gradient, its writes named as the kernel's facts
    loss=weighted_sum,
    order=1,
    kernel=True,
    title="SwiGLU (Triton kernels)",
    latex={"forward": r"y = \operatorname{silu}(a)\,b",
           "gradient": r"\nabla_a = g\,b\,\sigma(a)\big(1 + a(1 - \sigma(a))\big),\quad \nabla_b = g\,a\,\sigma(a)"},
)

declare(
    "triton square",
    {"right": Square, "float64 refused": SquareFloat64Refused},
    reference=square_reference,
    correct=("right", "float64 refused"),  # both right: the refusal tells the kernel's precision, it is no bug
    order=1,
    kernel=True,
    title="Square in float32 (Triton kernels)",
    latex={"forward": r"y = x^2", "gradient": r"\nabla_x = 2\,x\,g"},
)
