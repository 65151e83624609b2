"""The conformance report of a custom autograd Function, as PyTorch sees it.

``conformance_report(function, inputs)`` runs PyTorch's own checks (gradcheck and its variants)
and the torch.func transforms on ``function`` and says, per check, "pass", "fail",
"not supported" (the Function lacks the feature: no jvp, no vmap rule, no differentiable
backward...) or "skipped". Every check runs on fresh copies of the inputs and on its own;
nothing is raised, and PyTorch's own message is kept when a check does not pass.
"""

from __future__ import annotations

import re
import time
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch.autograd.gradcheck import GradcheckError

from ..engine.tolerances import Tolerances, gradcheck_tolerances

Tensor = torch.Tensor

STATUSES = ("pass", "fail", "not supported", "skipped")
CUDA_NONDET_TOL = 1e-12  # allowed difference between two identical backward passes on CUDA
MESSAGE_LIMIT = 1500  # characters of a message kept; gradcheck prints whole Jacobians

# What PyTorch 2.13 says when a Function lacks a feature, e.g. "You must implement the jvp
# function ... forward mode AD", "it must override the setup_context staticmethod" (legacy
# forward(ctx, ...) under torch.func), "... does not have vmap support", "Batching rule not
# implemented", "vmap: We do not yet support calling random operations", "trying to
# differentiate twice a function that was marked with @once_differentiable".
_NOT_SUPPORTED = re.compile(
    r"not (yet )?(implemented|supported)|n't support|do(es)? not (yet )?(have \w+ )?support"
    r"|must (override|implement)|differentiate twice",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Check:
    """The outcome of one check."""

    name: str  # short, e.g. "gradcheck (fast)"
    status: str  # one of STATUSES
    message: str  # PyTorch's or Python's own message when not "pass" (trimmed); "" or a note on pass
    seconds: float


class _Mismatch(Exception):
    """A check's own comparison of two results found them different."""


class _NotSupported(Exception):
    """The Function lacks what the check needs, found without PyTorch raising it as such."""


class _Skipped(Exception):
    """The check was not run."""


@dataclass(frozen=True)
class _Context:
    function: Callable[..., Tensor]
    inputs: tuple[Tensor, ...]
    eps: float
    atol: float
    rtol: float
    nondet_tol: float
    slow_limit: int

    def fresh(self) -> tuple[Tensor, ...]:
        """New leaf copies of the inputs: no check sees another's, and the caller's are untouched."""
        return tuple(x.detach().clone().requires_grad_(True) for x in self.inputs)

    def gradcheck(self, **options) -> None:
        with warnings.catch_warnings():
            # the dtype tolerances already allow for single and half precision
            warnings.filterwarnings("ignore", message="Input #.* is not a double precision")
            torch.autograd.gradcheck(
                self.function, self.fresh(), eps=self.eps, atol=self.atol, rtol=self.rtol,
                nondet_tol=self.nondet_tol, **options,
            )  # fmt: skip

    def compare(self, what: str, got, expected, *, atol=None, rtol=None) -> None:
        atol = self.atol if atol is None else atol
        rtol = self.rtol if rtol is None else rtol
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            a, b = a.detach(), b.detach()
            if a.shape != b.shape:
                raise _Mismatch(f"{what}: shapes differ for input {i}: {tuple(a.shape)} vs {tuple(b.shape)}")
            if not torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True):
                diff = (a - b).abs().nan_to_num(nan=float("inf")).max().item()
                raise _Mismatch(f"{what} differ for input {i}: max abs difference {diff:.3g} (atol={atol:g}, rtol={rtol:g})")


def _random_like(t: Tensor, seed: int = 0) -> Tensor:
    # drawn on the CPU from its own generator: the same on every device, the caller's RNG untouched
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t)


def _autograd_grads(ctx: _Context, inputs, grad_output=None) -> tuple[Tensor, ...]:
    """The Function's own backward, through plain torch.autograd.grad (zeros for unused inputs)."""
    out = ctx.function(*inputs)
    grad_output = torch.ones_like(out) if grad_output is None else grad_output
    return torch.autograd.grad(out, inputs, grad_output, allow_unused=True, materialize_grads=True)


# --------------------------------------------------------------------------------------------
# The checks. Each takes the context, raises when it does not pass, and may return a note.
# --------------------------------------------------------------------------------------------


def _gradcheck_slow(ctx: _Context):
    total = sum(x.numel() for x in ctx.inputs)
    if total > ctx.slow_limit:
        raise _Skipped(
            f"{total} input elements, above slow_limit={ctx.slow_limit}: slow gradcheck perturbs every "
            "element in a Python loop. Raise slow_limit to run it."
        )
    ctx.gradcheck(fast_mode=False)


def _gradgradcheck(ctx: _Context):
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Input #.* is not a double precision")
            torch.autograd.gradgradcheck(
                ctx.function, ctx.fresh(), eps=ctx.eps, atol=ctx.atol, rtol=ctx.rtol,
                nondet_tol=ctx.nondet_tol, fast_mode=True,
            )  # fmt: skip
    except GradcheckError as error:
        # a backward that is not differentiable shows up as a Jacobian mismatch (analytical
        # zeros) or "Numerical gradient ... expected to be zero": say so rather than "wrong"
        if not _backward_is_differentiable(ctx):
            raise _NotSupported(
                "the backward is not differentiable (its gradients depend on neither the inputs nor "
                f"grad_output through autograd), so double backward is not supported. gradgradcheck says: {error}"
            ) from error
        raise


def _backward_is_differentiable(ctx: _Context) -> bool:
    """Whether autograd can differentiate the backward's gradients w.r.t. the inputs or grad_output
    (not so for a backward that detaches, leaves torch, or is @once_differentiable)."""
    try:
        inputs = ctx.fresh()
        out = ctx.function(*inputs)
        grad_output = torch.ones_like(out, requires_grad=True)
        grads = [g for g in torch.autograd.grad(out, inputs, grad_output, create_graph=True, allow_unused=True)
                 if g is not None and g.requires_grad]
        if not grads:
            return False
        total = sum(g.sum() for g in grads)
        assert isinstance(total, torch.Tensor)  # grads is not empty
        seconds = torch.autograd.grad(total, (*inputs, grad_output), allow_unused=True)
        return any(s is not None for s in seconds)
    except Exception:  # noqa: BLE001 - cannot tell: keep gradgradcheck's own verdict
        return True


def _forward_ad(ctx: _Context):
    # forward-mode Jacobian against finite differences; the backward is not involved
    ctx.gradcheck(check_forward_ad=True, check_backward_ad=False, check_undefined_grad=False, fast_mode=True)


def _batched_grad(ctx: _Context):
    # what gradcheck(check_batched_grad=True) tests, without first repeating its Jacobian check:
    # the backward run under vmap over two grad_outputs equals two plain backward passes
    inputs = ctx.fresh()
    out = ctx.function(*inputs)
    grad_outputs = torch.stack([_random_like(out, 0), _random_like(out, 1)])
    batched = torch.autograd.grad(
        out, inputs, grad_outputs, retain_graph=True, allow_unused=True, is_grads_batched=True, materialize_grads=True
    )
    looped = [torch.autograd.grad(out, inputs, g, retain_graph=True, allow_unused=True, materialize_grads=True) for g in grad_outputs]
    ctx.compare("batched (vmap) and one-by-one gradients", batched, [torch.stack(gs) for gs in zip(*looped)])


def _backward_twice(ctx: _Context):
    inputs = ctx.fresh()
    grad_output = _random_like(ctx.function(*inputs).detach())
    first = _autograd_grads(ctx, inputs, grad_output)
    second = _autograd_grads(ctx, inputs, grad_output)
    ctx.compare("gradients of two identical forward+backward passes", first, second, atol=ctx.nondet_tol, rtol=0.0)
    return "bitwise equal" if ctx.nondet_tol == 0 else f"equal within nondet_tol={ctx.nondet_tol:g}"


def _func_grad(ctx: _Context):
    inputs = ctx.fresh()
    argnums = tuple(range(len(inputs)))
    got = torch.func.grad(lambda *xs: ctx.function(*xs).sum(), argnums=argnums)(*inputs)
    ctx.compare("torch.func.grad and torch.autograd.grad", got, _autograd_grads(ctx, inputs))


def _jacobian_check(transform) -> Callable[[_Context], None]:
    def check(ctx: _Context):
        inputs = ctx.fresh()
        got = transform(ctx.function, argnums=tuple(range(len(inputs))))(*inputs)
        expected = torch.autograd.functional.jacobian(ctx.function, inputs)  # row by row, the backward
        ctx.compare(f"{transform.__name__} and the torch.autograd Jacobian", got, expected)

    return check


def _vmap(ctx: _Context):
    inputs = ctx.fresh()
    scaled = tuple(x * 1.5 for x in inputs)
    got = torch.func.vmap(ctx.function)(*(torch.stack([x, s]) for x, s in zip(inputs, scaled)))
    expected = torch.stack([ctx.function(*inputs), ctx.function(*scaled)])
    ctx.compare("torch.func.vmap and one-by-one outputs", (got,), (expected,))


CHECKS: tuple[tuple[str, Callable[[_Context], str | None]], ...] = (
    ("gradcheck (fast)", lambda ctx: ctx.gradcheck(fast_mode=True)),
    ("gradcheck (slow)", _gradcheck_slow),
    ("gradgradcheck", _gradgradcheck),
    ("forward-mode AD", _forward_ad),
    ("batched grad (vmap)", _batched_grad),
    ("backward twice", _backward_twice),
    ("torch.func.grad", _func_grad),
    ("torch.func.jacrev", _jacobian_check(torch.func.jacrev)),
    ("torch.func.jacfwd", _jacobian_check(torch.func.jacfwd)),
    ("torch.func.vmap", _vmap),
)


def _trim(message: str) -> str:
    message = message.strip()
    if len(message) <= MESSAGE_LIMIT:
        return message
    return f"{message[:MESSAGE_LIMIT]}\n… ({len(message) - MESSAGE_LIMIT} more characters)"


def _run(name: str, body: Callable[[_Context], str | None], ctx: _Context) -> Check:
    """Run one check and turn whatever happens into a Check."""
    start = time.perf_counter()
    try:
        status, message = "pass", body(ctx) or ""
    except _Skipped as error:
        status, message = "skipped", str(error)
    except _NotSupported as error:
        status, message = "not supported", str(error)
    except (_Mismatch, GradcheckError) as error:
        status, message = "fail", str(error)
    except Exception as error:  # noqa: BLE001 - a report never raises
        missing = isinstance(error, NotImplementedError) or _NOT_SUPPORTED.search(str(error))
        status, message = ("not supported" if missing else "fail"), f"{type(error).__name__}: {error}"
    return Check(name, status, _trim(message), time.perf_counter() - start)


def _default_tolerances(inputs) -> Tolerances:
    """The loosest defaults among the inputs' dtypes."""
    return max((gradcheck_tolerances(x.dtype) for x in inputs), key=lambda t: t.atol, default=gradcheck_tolerances(torch.float64))


def conformance_report(
    function: Callable[..., Tensor],
    inputs: tuple[Tensor, ...],
    *,
    atol: float | None = None,
    rtol: float | None = None,
    step: float | None = None,
    nondet_tol: float | None = None,
    slow_limit: int = 4096,
) -> list[Check]:
    """Every check in ``CHECKS`` on ``function(*inputs)``, in order. ``step`` is gradcheck's
    finite-difference ``eps``; ``step``/``atol``/``rtol`` left as None take the dtype's defaults
    (``lib.engine.tolerances``). The inputs are copied, never modified."""
    default = _default_tolerances(inputs)
    if nondet_tol is None:  # CUDA's atomics reorder sums from run to run; the CPU is bitwise repeatable
        nondet_tol = CUDA_NONDET_TOL if any(x.device.type == "cuda" for x in inputs) else 0.0
    ctx = _Context(
        function=function,
        inputs=tuple(inputs),
        eps=default.step if step is None else step,
        atol=default.atol if atol is None else atol,
        rtol=default.rtol if rtol is None else rtol,
        nondet_tol=nondet_tol,
        slow_limit=slow_limit,
    )
    return [_run(name, body, ctx) for name, body in CHECKS]
