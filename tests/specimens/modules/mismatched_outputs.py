"""A user's module whose one formula gives three outputs against a reference that gives two (a
reference written for an older version of the Function): that formula is refused with the reason,
the other is checked. Our own, after a report against the command line."""

import torch

from gradient_lab import declare


class ScaledThrice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3, x * 4

    @staticmethod
    def backward(ctx, a, b, c):
        return 2 * a + 3 * b + 4 * c


class ScaledTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, a, b):
        return 2 * a + 3 * b


declare("scaled", formulas={"thrice": ScaledThrice, "twice": ScaledTwice}, correct=("twice",),
        reference=lambda x: (x * 2, x * 3))
