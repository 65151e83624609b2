"""A worked example for kernel authors: a Triton row softmax, forward and backward kernels wrapped in a
``torch.autograd.Function``, checked against plain torch ops.

    gradient-lab check examples/triton_kernels.py              # a few minutes under the interpreter
    gradient-lab check examples/triton_kernels.py --shape 4,8  # about a minute
    gradient-lab app --functions examples/triton_kernels.py

Autograd cannot see into a kernel: the backward kernel is the only gradient there is, so Gradient Lab
compares it, entry by entry of the Jacobian, with autograd's gradient of a reference written in torch
ops. ``kernel=True`` tells it the formulas are kernels: each backward call gets a fresh forward on
fresh copies (a kernel may write through its pointers into what it saved), a kernel that computes in
float32 is judged with float32's tolerances, and only the first order is checked. The family holds
the right kernel and one with a classic mistake, the backward's "- sum(g * y)" term dropped.
"""

import os

# Without a GPU, Triton's interpreter runs the kernels on CPU tensors (slowly, but exactly as
# written). It reads this switch when a kernel is defined, so it is set before triton is imported;
# on a GPU machine, export TRITON_INTERPRET=0 (or leave it unset there and drop this line).
os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from gradient_lab import declare  # noqa: E402


# One program per row: BLOCK is a power of two ≥ the row's length, and the mask covers the tail.
@triton.jit
def softmax_forward(X, Y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)  # compute in float32
    e = tl.where(mask, tl.exp(x - tl.max(x, axis=0)), 0.0)
    tl.store(Y + row * n_cols + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def softmax_backward(Y, G, DX, n_cols, FORGET_SUM: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(Y + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    if FORGET_SUM:
        dx = y * g  # the mistake: as if the normalising sum did not depend on x
    else:
        dx = y * (g - tl.sum(g * y, axis=0))  # dx = y ⊙ (g − Σ g·y)
    tl.store(DX + row * n_cols + cols, dx.to(DX.dtype.element_ty), mask=mask)


class TritonSoftmax(torch.autograd.Function):
    """Right: y = softmax(x) over the last dim; dx = y ⊙ (g − Σ g·y)."""

    FORGET_SUM = False

    @staticmethod
    def forward(ctx, x):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()  # rows × cols, contiguous: the kernels index row * n_cols + col
        y = torch.empty_like(x2)
        if x2.shape[0]:  # an empty batch launches nothing
            softmax_forward[(x2.shape[0],)](x2, y, x2.shape[1], BLOCK=triton.next_power_of_2(x2.shape[1]))
        ctx.save_for_backward(y)
        return y.view(x.shape)

    @classmethod
    def backward(cls, ctx, grad_output):
        (y,) = ctx.saved_tensors
        g = grad_output.reshape(y.shape).contiguous()  # grad_output may be expanded or strided: make it plain rows
        dx = torch.empty_like(y)
        if y.shape[0]:
            softmax_backward[(y.shape[0],)](y, g, dx, y.shape[1], FORGET_SUM=cls.FORGET_SUM,
                                            BLOCK=triton.next_power_of_2(y.shape[1]))
        return dx.view(grad_output.shape)


class TritonSoftmaxForgotSum(TritonSoftmax):
    """Wrong: dx = y ⊙ g, the − Σ g·y term missing."""

    FORGET_SUM = True


def weighted_sum(y):
    """A loss with fixed weights: softmax's rows sum to 1, so a plain sum's gradient would be zero."""
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return (y * weights.to(y)).sum()


declare(
    "triton softmax (example)",
    formulas={"softmax": TritonSoftmax, "forgot the sum": TritonSoftmaxForgotSum},
    correct=("softmax",),
    reference=lambda x: torch.softmax(x, dim=-1),  # plain torch ops: autograd through them is the truth
    loss=weighted_sum,
    kernel=True,  # fused kernels: fresh graphs, judged in their native precision (float32), first order only
    title="Row softmax in Triton (an example for kernel authors)",
    latex={
        "forward": r"y = \operatorname{softmax}(x)",
        "gradient": r"\nabla_x = y \odot \big(g - \textstyle\sum_j g_j\,y_j\big)",
        "softmax": r"y \odot \big(g - \textstyle\sum_j g_j\,y_j\big)",
        "forgot the sum": r"y \odot g",
    },
)
