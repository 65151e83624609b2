"""A correct Function whose backward leaves torch (NumPy), so it cannot be differentiated again, as
most hand-written backwards are; its author declares no order. The command line must exit 0 for it,
and say "first order only"; declared order=2, the same backward fails."""

import torch

from gradient_lab import declare


class CubeInNumpy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return torch.from_numpy(3 * x.detach().numpy() ** 2) * grad_output  # right, and off the graph


declare("cube in numpy", formulas={"cube": CubeInNumpy}, correct=("cube",), reference=lambda x: x**3)
declare("cube in numpy, order 2", formulas={"cube": CubeInNumpy}, correct=("cube",), reference=lambda x: x**3, order=2)
