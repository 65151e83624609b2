"""A zoo for parity (``lib.engine.parity``): Functions and ``torch.library`` custom ops that are right
in eager and wrong, or raising, under one way of running them, each re-created in our own words
from a kind of bug reported against PyTorch and kernel libraries; and correct controls.

Each specimen names the paths that part from eager (``parts``: path key -> "differs" or
"raises"); every other path must agree, be "as eager", or be not supported or skipped with its
reason. Nothing here knows about Gradient Lab: plain PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.autograd import Function

Tensor = torch.Tensor
COMPILED = ("aot_eager", "aot_eager fullgraph", "inductor", "inductor fullgraph", "dynamic")


def _x() -> tuple[Tensor, ...]:
    return (torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64),)


def sine(x):
    return torch.sin(x)


def cube(x):
    return x * x * x


# ---- right in eager, wrong or raising under one path ------------------------------------------------------


class FallbackUnderCompile(Function):
    """A kernel library's pattern: skip the hand-written kernel under torch.compile and use a
    fallback written for it, here one that drops the cosine's sign (``is_compiling`` branches are
    common in Triton-backed layers)."""

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if torch.compiler.is_compiling():
            return g * torch.cos(x).abs()
        return g * torch.cos(x)


class WrongJvp(Function):
    """The backward is right and the forward-mode rule is not (it forgets the factor 3 of x³): seen
    where a jvp was added later than the backward and tested only through backward."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x * g

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return x * x * t


class WrongVmapRule(Function):
    """A hand-written vmap rule that reads the batch along the wrong dimension when the batch is not
    at 0 — here it always sums the sample's first row into the output (a rule tested only at
    batch size 1 would not show it)."""

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0) if in_dims[0] is not None else x.expand(info.batch_size, *x.shape)
        return torch.sin(x) + x[:, :1, :1], 0


_KEPT: dict[str, Tensor] = {}


class KeptInGlobal(Function):
    """A backward that reads its input from a module-level dict instead of saved tensors (seen where
    a cache was shared between layers). PyTorch 2.13 compiles it and gets it right: a control."""

    @staticmethod
    def forward(x):
        _KEPT["x"] = x
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * torch.cos(_KEPT["x"])


class ItemInSetupContext(Function):
    """``.item()`` in setup_context (a Python float for a scale): a graph break, so fullgraph raises."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.largest = inputs[0].abs().max().item()  # kept for a log line; the gradient does not need it

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)


class ItemInBackward(Function):
    """``.item()`` in backward (a clip threshold read as a Python number): torch.func's jacrev and
    vmap cannot run it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        limit = g.abs().max().item() + 1.0  # never reached: the clip changes nothing
        return (g * torch.cos(x)).clamp(-limit, limit)


class DetachedBackward(Function):
    """A backward computed from detached tensors: the first order is right and double backward
    (create_graph=True) silently gives zero (seen in layers written for training only, without
    ``@once_differentiable`` to say so)."""

    @staticmethod
    def forward(x):
        return x * x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x.detach() ** 2 * g


# ---- torch.library custom ops -----------------------------------------------------------------------------


@torch.library.custom_op("gradient_lab_zoo::sine", mutates_args=())
def custom_sine(x: Tensor) -> Tensor:
    return torch.sin(x)


@custom_sine.register_fake
def _(x):
    return torch.empty_like(x)


def _save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _sine_backward(ctx, g):
    (x,) = ctx.saved_tensors
    return g * torch.cos(x)


custom_sine.register_autograd(_sine_backward, setup_context=_save_input)


@torch.library.custom_op("gradient_lab_zoo::cube", mutates_args=())
def custom_cube(x: Tensor) -> Tensor:
    return x * x * x


@custom_cube.register_fake
def _(x):
    return torch.empty_like(x)


def _cube_backward_wrong(ctx, g):  # forgets the 3 of 3x², as its Function twin does
    (x,) = ctx.saved_tensors
    return x * x * g


custom_cube.register_autograd(_cube_backward_wrong, setup_context=_save_input)


class CubeForgetsThree(Function):
    """The wrong custom op's autograd.Function twin: the same wrong backward."""

    @staticmethod
    def forward(x):
        return x * x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return x * x * g


@torch.library.custom_op("gradient_lab_zoo::sine_unfaked", mutates_args=())
def custom_sine_without_fake(x: Tensor) -> Tensor:
    return torch.sin(x)


custom_sine_without_fake.register_autograd(_sine_backward, setup_context=_save_input)


# ---- controls: right everywhere they run --------------------------------------------------------------------


class Sine(Function):
    """The setup_context style with a generated vmap rule: supported by every path."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)


class LegacySine(Function):
    """The forward(ctx, ...) style: torch.func does not run it (the Function's limit, said so)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)


@dataclass(frozen=True)
class Specimen:
    name: str
    function: Callable[..., Tensor]
    reference: Callable[..., Tensor]
    parts: dict[str, str] = field(default_factory=dict)  # path key -> "differs" | "raises": where it parts from eager
    eager_wrong: bool = False  # wrong in eager too (its other paths are then "as eager")
    opcheck_fails: tuple[str, ...] = ()  # a custom op's opcheck tests that fail
    inputs: Callable[[], tuple[Tensor, ...]] = _x


BROKEN = (
    Specimen("fallback under compile", FallbackUnderCompile.apply, sine,
             {k: "differs" for k in COMPILED}),
    Specimen("wrong jvp", WrongJvp.apply, cube, {"jvp": "differs", "jacfwd": "differs"}),
    Specimen("wrong vmap rule", WrongVmapRule.apply, sine, {"vmap": "differs"}),
    Specimen(".item() in setup_context", ItemInSetupContext.apply, sine, {"aot_eager fullgraph": "raises", "inductor fullgraph": "raises",
                                                                      "vmap": "raises"}),
    Specimen(".item() in backward", ItemInBackward.apply, sine, {"jacrev": "raises", "vmap": "raises"}),
    Specimen("detached backward", DetachedBackward.apply, cube, {"double backward": "differs"}),
    Specimen("custom op without a fake", custom_sine_without_fake, sine, {k: "raises" for k in (*COMPILED, "double backward compiled")},
             opcheck_fails=("test_faketensor", "test_aot_dispatch_dynamic")),
    Specimen("custom op, wrong backward", custom_cube, cube, {"eager": "differs", "double backward": "differs"}, eager_wrong=True),
    Specimen("its Function twin", CubeForgetsThree.apply, cube, {"eager": "differs", "double backward": "differs"}, eager_wrong=True),
)
CONTROLS = (
    Specimen("sine", Sine.apply, sine),
    Specimen("legacy sine", LegacySine.apply, sine),
    Specimen("custom op sine", custom_sine, sine),
    Specimen("plain callable", sine, sine),
    Specimen("tensor kept in a global", KeptInGlobal.apply, sine),
)
SPECIMENS = BROKEN + CONTROLS
