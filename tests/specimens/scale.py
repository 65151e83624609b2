"""Local bugs that show at the sizes Functions run, and that gradcheck's fast mode dilutes into one
scalar: one element 1 % off, a row reading its neighbour's grad_output (a wrong offset in a row-wise
kernel), a weight's gradient transposed; each beside its right twin. Our own, written for #39; the
tests and ``benchmarks/bench_scale.py`` share them."""

from tests.specimens.grad_output import Softmax
from tests.specimens.zoo import Matmul, Square

__all__ = ["Matmul", "MatmulWeightTransposed", "Softmax", "SoftmaxRowReadsItsNeighbour", "Square", "SquareOneElementOff",
           "SquareSignFlipped"]


class SquareOneElementOff(Square):
    """The element a third of the way in gets a gradient 1 % off."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        grad = 2 * x * g
        grad.view(-1)[grad.numel() // 3] *= 1.01
        return grad


class SquareSignFlipped(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return -2 * x * g


class SoftmaxRowReadsItsNeighbour(Softmax):
    """Row 5 reads row 4's grad_output."""

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        g[5] = g[4]
        return Softmax.backward(ctx, g)


class MatmulWeightTransposed(Matmul):
    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.T, (x.T @ g).T  # the weight's gradient transposed: right shape (w is square), wrong values
