"""A zoo of custom autograd Functions: one wrong backward per class of bug, and correct ones with
kinks. Each comes with a reference of plain torch ops and its own inputs (float64), so that
tests can hold the engine's verdict against gradcheck's slow mode.

Only what tests need: a specimen per class, written as a user would write it, short."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from gradient_lab.app.family import Family, Formula

Tensor = torch.Tensor


class Square(torch.autograd.Function):
    """y = x², right."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class SquareIgnoresGradOutput(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x  # grad_output ignored


class SquareReducesGradOutput(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g.mean()  # grad_output reduced to its mean


class SquareSumsGradOutput(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g.sum()


class RowCubes(torch.autograd.Function):
    """y_i = Σ_j x_ij³, right."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x**3).sum(1)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * g[:, None]


class RowCubesRolled(RowCubes):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * g.roll(1, 0)[:, None]  # rows of grad_output permuted


class SquareAbsGradOutput(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g.abs()  # not linear in grad_output: right for gradcheck's 0/1 upstreams only


class SquarePlusConstant(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g + 1e-6  # a small added term: not 0 for a zero upstream


class RowCubesLeaking(RowCubes):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * (g + 1e-3 * g.roll(1, 0))[:, None]  # a little of the neighbouring row's grad_output


class Matmul(torch.autograd.Function):
    """y = x @ w, right."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.T, x.T @ g


class MatmulTransposed(Matmul):
    """y = x @ w with w square; the gradient of x uses w where it needs wᵀ."""

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, x.T @ g  # should be g @ w.T


class ProductSwapped(torch.autograd.Function):
    """y = a·b², the two gradients returned in each other's place."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return 2 * a * b * g, b * b * g  # swapped


class SineSignFlipped(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return -torch.cos(x) * g


class CubeFactor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x**2 * g  # 3 expected: a constant factor 2/3


class SoftmaxNoProjection(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        s = torch.softmax(x, -1)
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx, g):
        (s,) = ctx.saved_tensors
        return s * g  # the projection term −s·Σ(g·s) is missing


class StraightThroughClamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(-1, 1)

    @staticmethod
    def backward(ctx, g):
        return g  # right only inside [−1, 1]


class ClampLeaksInABand(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-1, 1)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x.abs() <= 2).to(g)  # the bound written as 2: wrong in the band 1 < |x| ≤ 2 only


class NormWrongDim(torch.autograd.Function):
    """‖x‖ over the last dim of a 3-D input; the backward normalises over dim 1."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.norm(dim=-1)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return x / x.norm(dim=1, keepdim=True) * g[..., None]


class CubeNaNForNegatives(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * g * (1 + 0 * torch.log(x))  # NaN wherever x < 0


class WrongSquare(torch.autograd.Function):
    """An inner Function whose first order is right and whose own backward is wrong."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return x * g  # 2·x·g expected


class CubeWrongDoubleBackward(torch.autograd.Function):
    """First order right; its backward uses WrongSquare, so double backward is wrong."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * WrongSquare.apply(x) * g


class CubeDetachedBackward(torch.autograd.Function):
    """First order right; the backward detaches, so there is no double backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x.detach() ** 2 * g.detach()


# ---- correct ones, with kinks away from the sampled points ------------------------------------


class Relu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0).to(g)


class Abs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.abs()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.sign()


class RowMax(torch.autograd.Function):
    """Max over each row (the last dim), the gradient to the first maximum (what ``max(dim)`` with
    its indices does)."""

    @staticmethod
    def forward(ctx, x):
        values, index = x.max(-1)
        ctx.save_for_backward(index)
        ctx.shape = x.shape
        return values

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        grad = torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
        return grad.scatter(-1, index.unsqueeze(-1), g.unsqueeze(-1))


class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-1, 1)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ((x > -1) & (x < 1)).to(g)


def _away_from_kinks(points: tuple[float, ...]) -> Callable[[Tensor], Tensor]:
    """Moves elements closer than 0.05 to a kink out to 0.05 on their side of it."""

    def move(x: Tensor) -> Tensor:
        for kink in points:
            near = (x - kink).abs() < 0.05
            x = torch.where(near, kink + 0.05 * torch.where(x >= kink, 1.0, -1.0).to(x), x)
        return x

    return move


@dataclass(frozen=True)
class Specimen:
    name: str
    function: type[torch.autograd.Function]
    reference: Callable[..., Tensor]
    shapes: tuple[tuple[int, ...], ...]
    wrong_first: bool  # first order wrong
    wrong_second: bool  # double backward wrong (or missing)
    prepare: Callable[[Tensor], Tensor] = lambda x: x
    gradcheck_blind: bool = False  # wrong, yet gradcheck passes it (its upstreams are 0 and 1 only)
    diagnosis: str = ""  # the kind of finding the diagnosis must name (gradient_lab.engine.diagnosis)

    def inputs(self, seed: int = 0) -> tuple[Tensor, ...]:
        generator = torch.Generator().manual_seed(seed)
        return tuple(self.prepare(torch.randn(shape, generator=generator, dtype=torch.float64) * 1.5) for shape in self.shapes)

    def family(self, with_reference: bool = True) -> Family:
        names = tuple(f"x{i + 1}" for i in range(len(self.shapes)))
        return Family(
            name=f"zoo-{self.name}", title=self.name, description="zoo", input_names=names,
            reference=self.reference if with_reference else None,
            formulas={"f": Formula("f", self.function.apply, "zoo", "", not self.wrong_first)},
            build_inputs=lambda shape, **_: self.inputs(), loss=lambda y: y.sum(),
            order=2,  # every specimen is held to its double backward
        )


WRONG = (
    Specimen("ignores grad_output", SquareIgnoresGradOutput, lambda x: x * x, ((6, 5),), True, True, diagnosis="grad_output ignored"),
    Specimen("grad_output mean", SquareReducesGradOutput, lambda x: x * x, ((6, 5),), True, True, diagnosis="grad_output reduced"),
    Specimen("grad_output sum", SquareSumsGradOutput, lambda x: x * x, ((6, 5),), True, True, diagnosis="grad_output reduced"),
    Specimen("rows rolled", RowCubesRolled, lambda x: (x**3).sum(1), ((6, 5),), True, True, diagnosis="grad_output rolled"),
    Specimen("grad_output abs", SquareAbsGradOutput, lambda x: x * x, ((6, 5),), True, True, gradcheck_blind=True, diagnosis="not linear"),
    Specimen("added constant", SquarePlusConstant, lambda x: x * x, ((6, 5),), True, False, diagnosis="added term"),
    Specimen("small leak", RowCubesLeaking, lambda x: (x**3).sum(1), ((6, 5),), True, True, diagnosis="grad_output mixed"),
    Specimen("transposed", MatmulTransposed, lambda x, w: x @ w, ((4, 5), (5, 5)), True, True, diagnosis="transposed"),
    Specimen("inputs swapped", ProductSwapped, lambda a, b: a * b * b, ((4, 5), (4, 5)), True, True, diagnosis="swapped"),
    Specimen("sign flipped", SineSignFlipped, torch.sin, ((6, 5),), True, True, diagnosis="sign"),
    Specimen("factor", CubeFactor, lambda x: x**3, ((6, 5),), True, True, diagnosis="factor"),
    Specimen("missing term", SoftmaxNoProjection, lambda x: torch.softmax(x, -1), ((4, 6),), True, True, diagnosis="rank-one term"),
    Specimen("band", ClampLeaksInABand, lambda x: x.clamp(-1, 1), ((6, 5),), True, False, _away_from_kinks((-2.0, -1.0, 1.0, 2.0)),
             diagnosis="region"),
    Specimen("region", StraightThroughClamp, lambda x: x.clamp(-1, 1), ((6, 5),), True, False, _away_from_kinks((-1.0, 1.0)), diagnosis="region"),
    Specimen("reduction dim", NormWrongDim, lambda x: x.norm(dim=-1), ((3, 4, 5),), True, True, diagnosis="reduction dim"),
    Specimen("not finite", CubeNaNForNegatives, lambda x: x**3, ((6, 5),), True, True, diagnosis="not finite"),
    Specimen("double backward", CubeWrongDoubleBackward, lambda x: x**3, ((6, 5),), False, True, diagnosis="double backward"),
    Specimen("detached backward", CubeDetachedBackward, lambda x: x**3, ((6, 5),), False, True, diagnosis="double backward"),
)

RIGHT = (
    Specimen("square", Square, lambda x: x * x, ((6, 5),), False, False),
    Specimen("row cubes", RowCubes, lambda x: (x**3).sum(1), ((6, 5),), False, False),
    Specimen("relu", Relu, torch.relu, ((6, 5),), False, False, _away_from_kinks((0.0,))),
    Specimen("abs", Abs, torch.abs, ((6, 5),), False, False, _away_from_kinks((0.0,))),
    Specimen("row max", RowMax, lambda x: x.max(1).values, ((6, 5),), False, False),
    Specimen("clamp", Clamp, lambda x: x.clamp(-1, 1), ((6, 5),), False, False, _away_from_kinks((-1.0, 1.0))),
)
