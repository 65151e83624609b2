"""An example of your own Functions in Gradient Lab: a hand-written swish, y = x·sigmoid(x).

Start the app with it:

    make run ARGS="-- --functions examples/my_functions.py"
    # or: GRADIENT_LAB_FUNCTIONS=examples/my_functions.py make run

Then pick the family "swish" in the sidebar. Every page works on it as on cosine.
"""

import torch

from lib.family import declare


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
