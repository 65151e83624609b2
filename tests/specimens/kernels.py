"""Stand-ins for fused kernels, in plain torch: what a Triton or CUDA kernel does that autograd cannot
see. They compute in float32 whatever they are given (as Liger-Kernel's and most Triton kernels do),
refuse float64 (Liger's RMSNorm raised ``KeyError: torch.float64`` in backward only), and write
through their pointers into their inputs, saved tensors or grad_output (Liger's SwiGLU writes its
gradients into the saved inputs; its cross entropy writes the gradient into the logits in forward).
Written with ``.data`` so that autograd's version counters do not see the writes, as with a kernel's."""

import torch


def square(x):
    return x * x


class SquareInFloat32(torch.autograd.Function):
    """x² computed in float32, returned in the input's dtype: right, float32-accurate."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x.float() * x.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (2 * x.float() * g.float()).to(x.dtype)


class SquareRefusingFloat64(SquareInFloat32):
    """Right, and raises KeyError for float64 in backward only, as a table of kernels per dtype does."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if x.dtype == torch.float64:
            raise KeyError(torch.float64)
        return 2 * x * g


class SquareHalfGradient(SquareInFloat32):
    """Bug: the factor 2 forgotten, in float32 internals."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (x.float() * g.float()).to(x.dtype)


class SquareWritingIntoSaved(SquareInFloat32):
    """Right maths; its backward writes the gradient into the saved input and returns it (after
    Liger-Kernel's SwiGLU, which reuses its inputs' memory for their gradients)."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x.data.mul_(2).mul_(g)
        return x


class SquareWritingIntoGradOutput(SquareInFloat32):
    """Right maths; its backward scales grad_output in place and returns it."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        g.data.mul_(2 * x)
        return g


class SquareWritingIntoInput(torch.autograd.Function):
    """Right maths; its forward writes the gradient for an upstream of ones into its input (after
    Liger-Kernel's cross entropy, which stores the gradient in the logits during forward)."""

    @staticmethod
    def forward(ctx, x):
        y = x * x
        grad = 2 * x
        x.data.copy_(grad)
        ctx.save_for_backward(grad)
        return y

    @staticmethod
    def backward(ctx, g):
        (grad,) = ctx.saved_tensors
        return grad * g
