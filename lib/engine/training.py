"""Does it train: a few steps of plain gradient descent on the problem's loss with the formula's
gradient, beside the same steps with the truth's, from the same point.

This is the test users of kernel libraries write by hand (a few steps of a small model, the custom
kernel against its reference): a wrong backward is a wrong direction, and the two paths part.
The truth is autograd through the reference where the verdict trusts it everywhere, else finite
differences of the formula's own forward where they are cheap enough to take at every step.
One learning rate for both paths, set so that the truth's first step moves the inputs by
``STEP_SIZE`` of their norm. The paths part at the first step where the formula's inputs are
farther from the truth's than ``PART_RTOLS`` times the verdict's rtol of the distance the truth's
have travelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import torch

from .evaluate import numerical_gradient
from .report import Failure

if TYPE_CHECKING:
    from .options import CheckOptions
    from .stages import FirstOrder

Tensor = torch.Tensor
STEP_SIZE = 0.05  # the truth's first step, as a part of the inputs' norm
PART_RTOLS = 10  # the paths part beyond this many times the verdict's rtol of the distance travelled
FLAT_EPS = 1e4  # a first step of the truth's that lowers the loss by less than this many eps of it: the loss is flat
MAX_EVALUATIONS = 4096  # finite differences at every step (no trusted reference): at most this many evaluations in all
# the paths stay together; they part; the formula raises on the way; they stay together although the
# first-order verdict found wrong entries (the loss's own upstream does not reach them)
OUTCOMES = ("pass", "fail", "raises", "hides it")


@dataclass(frozen=True)
class Training:
    """Both paths, step by step, as facts."""

    steps: int
    learning_rate: float
    truth: str  # what the truth's path follows: "reference", "surrogate" or "numerical" (finite differences)
    losses: dict[str, np.ndarray]  # "formula", "truth": the loss before each step and after the last (steps + 1 values)
    distance: np.ndarray  # per step (0 … steps): |x_formula − x_truth| / |x_truth − x_0| (0 at the start)
    allowed: float  # the paths part where ``distance`` exceeds it
    parted: int = -1  # the first step where they part; −1: never
    failure: Failure | None = None  # the formula raised on the way (its step is ``len(losses["formula"]) - 1``)
    verdict_failed: bool = False  # the first-order verdict found wrong entries

    @property
    def truth_words(self) -> str:
        return {"numerical": "finite differences", "surrogate": "the declared surrogate"}.get(self.truth, "the reference")

    @property
    def outcome(self) -> str:
        if self.failure is not None:
            return "raises"
        return "fail" if self.parted >= 0 else "hides it" if self.verdict_failed else "pass"

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    @property
    def final_gap(self) -> float:
        """The last loss of the formula's path minus the truth's."""
        return float(self.losses["formula"][-1] - self.losses["truth"][-1])

    def describe(self) -> str:
        truth = self.truth_words
        if self.failure is not None:
            return f"does it train: the formula raised at step {len(self.losses['formula']) - 1} of {self.steps}: {self.failure}"
        losses = (f"loss {_number(self.losses['truth'][0])} → {_number(self.losses['formula'][-1])} with its gradient, "
                  f"{_number(self.losses['truth'][-1])} with {truth}'s")
        if self.parted < 0 and self.verdict_failed:
            return (f"does it train: on this loss, {self.steps} steps of gradient descent follow {truth}'s path, although the verdict "
                    f"found wrong entries: the loss's own upstream gradient does not reach them ({losses})")
        if self.parted < 0:
            return (f"does it train: {self.steps} steps of gradient descent follow {truth}'s path (within {self.allowed:.2g} of the distance "
                    f"travelled; {losses})")
        return (f"does it train: its path parts from {truth}'s at step {self.parted} of {self.steps} ({self.distance[self.parted]:.3g} of "
                f"the distance travelled apart, allowed {self.allowed:.2g}; {losses})")

    def line(self) -> str:
        """The result in a card's few words; ``describe`` has the numbers."""
        truth = self.truth_words
        if self.failure is not None:
            return f"training: raises at step {len(self.losses['formula']) - 1} of {self.steps}"
        if self.parted >= 0:
            return f"training: its path parts from {truth}'s at step {self.parted} of {self.steps}"
        if self.verdict_failed:
            return f"training: follows {truth}'s path on this loss, which hides the wrong entries"
        return f"training: follows {truth}'s path for {self.steps} steps"

    def curves(self) -> dict[str, np.ndarray]:
        """What a figure draws: the two loss curves, by step."""
        return {"with the formula's gradient": self.losses["formula"], "with the truth's gradient": self.losses["truth"]}


def _number(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "not finite"


def _flat(xs: Sequence[Tensor]) -> Tensor:
    return torch.cat([x.detach().reshape(-1).double().cpu() for x in xs]) if xs else torch.zeros(0, dtype=torch.float64)


def _loss_and_gradient(function: Callable[..., Tensor], loss: Callable[[Tensor], Tensor], xs: Sequence[Tensor],
                       numerical: Sequence | None = None, step: float | None = None) -> tuple[float, list[Tensor]]:
    """The loss at ``xs`` and its gradient: by the function's backward, or by finite differences along ``numerical``'s plans."""
    if numerical is None:
        leaves = [x.detach().requires_grad_() for x in xs]
        with torch.enable_grad():
            value = loss(function(*leaves))
            grads = torch.autograd.grad(value, leaves, allow_unused=True)
        return float(value.detach()), [torch.zeros_like(x) if g is None else g.detach() for x, g in zip(leaves, grads)]
    with torch.no_grad():
        y = function(*xs).detach().requires_grad_()
    with torch.enable_grad():
        value = loss(y)
        (upstream,) = torch.autograd.grad(value, y)
    by_differences = [torch.from_numpy(numerical_gradient(function, [x.detach() for x in xs], plan, upstream, step)).to(x)
                      for x, plan in zip(xs, numerical)]
    return float(value.detach()), by_differences


def train(function: Callable[..., Tensor], truth: Callable[..., Tensor], loss: Callable[[Tensor], Tensor], inputs: Sequence[Tensor],
          steps: int, rtol: float, numerical: Sequence | None = None, step: float | None = None, truth_name: str = "reference") -> Training | None:
    """Both paths from ``inputs`` (see the module); None where the truth's gradient is zero or not
    finite at the start, or where the truth's own first step does not lower the loss (a loss flat at
    the point, as the sum of a softmax: nothing to follow)."""
    start = [x.detach().clone() for x in inputs]
    lossed, truth_grads = _loss_and_gradient(truth, loss, start, numerical, step)
    g = _flat(truth_grads)
    if not math.isfinite(lossed) or not torch.isfinite(g).all() or float(g.norm()) == 0:
        return None
    learning_rate = STEP_SIZE * max(float(_flat(start).norm()), 1.0) / float(g.norm())
    with torch.no_grad():  # its value alone: the gradient there is taken in the loop
        first_step = float(loss(truth(*(x - learning_rate * gx.to(x) for x, gx in zip(start, truth_grads)))))
    eps = torch.finfo(inputs[0].dtype).eps if inputs[0].is_floating_point() else torch.finfo(torch.float64).eps
    if not lossed - first_step > FLAT_EPS * eps * max(abs(lossed), 1.0):
        return None  # the truth's own step does not lower the loss beyond its rounding: the loss is flat here, nothing to follow
    mine, theirs = [x.clone() for x in start], [x.clone() for x in start]
    losses: dict[str, list[float]] = {"formula": [], "truth": []}
    distance, allowed, parted, failure = [0.0], PART_RTOLS * rtol, -1, None
    origin = _flat(start)
    for k in range(steps + 1):
        try:
            value, grads = _loss_and_gradient(function, loss, mine)
        except Exception as error:  # noqa: BLE001 - the formula under test's: where it raised is a fact of the path
            failure = Failure.of("backward", error, when=f"training step {k}")
            break
        t_value, t_grads = (lossed, truth_grads) if k == 0 else _loss_and_gradient(truth, loss, theirs, numerical, step)
        losses["formula"].append(value)
        losses["truth"].append(t_value)
        if k:
            travelled = float((_flat(theirs) - origin).norm())
            distance.append(float((_flat(mine) - _flat(theirs)).norm()) / max(travelled, 1e-300))
            if parted < 0 and not distance[-1] <= allowed:  # NaN parts too
                parted = k
        if k == steps:
            break
        with torch.no_grad():
            mine = [x - learning_rate * gx.to(x) for x, gx in zip(mine, grads)]
            theirs = [x - learning_rate * gx.to(x) for x, gx in zip(theirs, t_grads)]
    return Training(steps, learning_rate, truth_name, {k: np.asarray(v, dtype=float) for k, v in losses.items()},
                    np.asarray(distance, dtype=float), allowed, parted, failure)


class Stage:
    name = "training"

    def applies(self, first: FirstOrder, options: CheckOptions, earlier: Mapping[str, Any]) -> bool:
        # at scale (a sampled verdict) each step is a pass over millions of elements: the steps would cost many verdicts
        return options.training > 0 and first.judged and bool(first.exact.inputs) and not any(p.sampled for p in first.plans)

    def run(self, first: FirstOrder, options: CheckOptions, earlier: Mapping[str, Any]) -> Training | None:
        assert first.jacobian is not None  # it applies only where the first order was judged
        found = self._paths(first, options)
        return replace(found, verdict_failed=not first.jacobian.passed) if found is not None else None

    @staticmethod
    def _paths(first: FirstOrder, options: CheckOptions) -> Training | None:
        p = first.checked
        assert p.function is not None  # judged: its forward ran
        if p.reference is not None and all(first.by_reference):
            return train(p.function, p.reference, p.loss, p.inputs, options.training, first.tolerances.rtol, truth_name=p.role)
        if p.role == "surrogate" or any(plan.values is None for plan in first.plans):
            return None  # no truth to follow
        if options.training * sum(plan.evaluations for plan in first.plans) > MAX_EVALUATIONS:
            return None  # finite differences at every step would cost more than the verdict
        plans = [replace(plan, values=None, reference_values=None, gaps=None, gap_rounding=None) for plan in first.plans]
        return train(p.function, p.function, p.loss, p.inputs, options.training, first.tolerances.rtol, plans, first.tolerances.step,
                     truth_name="numerical")


STAGE = Stage()
