"""An example of your own Functions in Gradient Lab: a hand-written swish, y = x·sigmoid(x).

Start the app with it:

    make run ARGS="-- --functions examples/my_functions.py"
    # or: GRADIENT_LAB_FUNCTIONS=examples/my_functions.py make run

Then pick the family "swish" in the sidebar. Every page works on it as on cosine. The family
"clamp" shows kinks: its inputs are rounded to steps of 0.5, so some sit exactly on the clamp's
bounds, where no single derivative is right; the maps outline them in orange.
"""

import torch

from lib.app.family import declare


class Swish(torch.autograd.Function):
    """Correct: dy/dx = s + x·s·(1 − s), with s = sigmoid(x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * (s + x * s * (1 - s))


class SwishForgotChainRule(torch.autograd.Function):
    """A real mistake: differentiates x·s as if s were constant, dy/dx = s."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)


declare(
    "swish",
    formulas={"swish": Swish, "forgot chain rule": SwishForgotChainRule},
    correct=("swish",),
    reference=lambda x: x * torch.sigmoid(x),  # plain torch ops: autograd through them is the truth
    title="Swish (an example module)",
    latex={
        "forward": r"y = x\,\sigma(x)",
        "gradient": r"\frac{dy}{dx} = \sigma(x) + x\,\sigma(x)\,(1 - \sigma(x))",
        "swish": r"g\,\big(\sigma + x\,\sigma\,(1-\sigma)\big)",
        "forgot chain rule": r"g\,\sigma(x)",
    },
)


class Clamp(torch.autograd.Function):
    """Correct: 1 inside [−1, 1], 0 outside. At ±1 any value in [0, 1] is a valid subgradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * ((x >= -1) & (x <= 1)).to(grad_output)


class ClampOpenInterval(torch.autograd.Function):
    """A real mistake: the gradient leaks outside the bounds (|x| ≤ 2 instead of ≤ 1)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x.abs() <= 2).to(grad_output)


def on_half_steps(shape, *, seed=0, dtype=torch.float64, device="cpu", **_params):
    """Normals rounded to steps of 0.5: about a fifth of the elements land exactly on ±1."""
    x = torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return ((x * 2).round() / 2).to(dtype=dtype, device=device),


declare(
    "clamp",
    formulas={"clamp": Clamp, "leaks outside": ClampOpenInterval},
    correct=("clamp",),
    reference=lambda x: x.clamp(-1.0, 1.0),
    build_inputs=on_half_steps,
    title="Clamp to [−1, 1] (an example with kinks)",
    latex={"forward": r"y = \min(\max(x, -1), 1)", "gradient": r"\frac{dy}{dx} = [\,|x| \le 1\,]"},
)
