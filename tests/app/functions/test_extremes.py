"""Every correct Function of the gallery against the PyTorch op it stands for, at the extremes.

Cases are drawn by hypothesis, with the known extremes pinned as explicit examples: dtypes float16,
bfloat16, float32 and float64; row norms from 1e-30 to 1e30; 0-d, 1-d, 2-d, 3-d and broadcast
shapes, every dim; zero rows, and ±Inf and NaN at single elements. For each: the value, the
gradient for a random upstream, and the second derivative along a random direction.

The oracle, wherever PyTorch's result is finite:
- ours is finite too (never NaN where PyTorch is a number), and
- ours is close to PyTorch's in the case's dtype, or close to the truth (PyTorch's op in float64
  on the same rounded inputs), or at least as close to the truth as PyTorch's. A Function may be
  more accurate than PyTorch, never less.
  The one such case known is cosine in float32 at row norm 1e20, where PyTorch's norm overflows
  and it gives 0 for parallel rows; ours scales the rows and gives 1 (see its docstring).
Where PyTorch's result is not finite (NaN or Inf inputs, overflow), ours is not held to anything
but not raising.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gradient_lab.app.family import get_family

Tensor = torch.Tensor
DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# closeness in each dtype, relative to the size of the values compared (PyTorch's own test tolerances, roughly)
RTOL = {"float64": 1e-5, "float32": 1e-3, "float16": 2e-2, "bfloat16": 8e-2}  # gradcheck's float64 rtol is 1e-3


@dataclass(frozen=True)
class Op:
    family: str
    theirs: Callable[..., Tensor]  # (*inputs, **params) -> output: PyTorch's own op
    inputs: int = 1
    reduces: bool = True  # whether it has a dim
    scale_free: bool = False  # its derivatives scale like 1/x^k (cosine, normalize, layernorm)
    truth: Callable[..., Tensor] | None = None  # a float64 formula more accurate than PyTorch's own, if it has one


OPS = {
    "cosine": Op("cosine", lambda a, b, dim, eps: F.cosine_similarity(a, b, dim=dim, eps=eps), inputs=2, scale_free=True),
    "logsumexp": Op("logsumexp", lambda x, dim: torch.logsumexp(x, dim)),
    "softmax": Op("softmax", lambda x, dim: torch.softmax(x, dim)),
    "normalize": Op("normalize", lambda x, dim, eps: F.normalize(x, p=2.0, dim=dim, eps=eps), scale_free=True),
    "softplus": Op("softplus", lambda x, beta, threshold: F.softplus(x, beta=beta, threshold=threshold), reduces=False),
    "layernorm": Op("layernorm", None),  # set below: normalises over one dim
    # PyTorch's float64 GELU loses every digit for x < −8 (1 + erf cancels); erfc does not
    "gelu": Op("gelu", lambda x: F.gelu(x), reduces=False, truth=lambda x: x * 0.5 * torch.special.erfc(-x / math.sqrt(2))),
}


def _layer_norm(x: Tensor, dim: int, eps: float) -> Tensor:
    # F.layer_norm normalises the last dims: move the family's dim last and back
    moved = x.movedim(dim, -1) if x.dim() else x.reshape(1)
    y = F.layer_norm(moved, moved.shape[-1:], eps=eps)
    return y.movedim(-1, dim) if x.dim() else y.reshape(())


OPS["layernorm"] = Op("layernorm", _layer_norm, scale_free=True)


@dataclass(frozen=True)
class Case:
    op: str
    dtype: str
    shapes: tuple[tuple[int, ...], ...]
    dim: int
    scale: float  # every row's norm, roughly
    special: str  # "none", "zero row", "inf", "-inf", "nan"
    seed: int
    params: tuple[tuple[str, float], ...] = ()

    def inputs(self) -> tuple[Tensor, ...]:
        generator = torch.Generator().manual_seed(self.seed)
        xs = []
        for shape in self.shapes:
            x = torch.randn(shape, generator=generator, dtype=torch.float64)
            features = shape[self.dim] if shape else 1
            x = x * (self.scale / math.sqrt(max(features, 1)))
            xs.append(x)
        x = xs[0].reshape(-1)
        if x.numel() and self.special == "zero row":
            xs[0] = xs[0] * 0 if xs[0].dim() < 2 else xs[0].index_fill(0, torch.tensor([0]), 0.0)
        elif x.numel() and self.special in ("inf", "-inf", "nan"):
            flat = xs[0].reshape(-1).clone()
            flat[self.seed % flat.numel()] = float(self.special)
            xs[0] = flat.reshape(xs[0].shape)
        return tuple(t.to(DTYPES[self.dtype]) for t in xs)

    def call_params(self) -> dict:
        params = dict(self.params)
        if OPS[self.op].reduces:
            params["dim"] = self.dim
        return params


def ours(case: Case) -> Callable[..., Tensor]:
    family = get_family(case.op)
    return lambda *xs: family.run("corrected", xs, **case.call_params())


def theirs(case: Case, accurate: bool = False) -> Callable[..., Tensor]:
    """PyTorch's op; ``accurate``: the op's more accurate float64 formula where it has one."""
    op = (OPS[case.op].truth or OPS[case.op].theirs) if accurate else OPS[case.op].theirs
    return lambda *xs: op(*xs, **case.call_params())


def derivatives(function, xs: tuple[Tensor, ...], seed: int):
    """(value, gradient for a random upstream, derivative of that gradient along a random
    direction), every input flattened together; None where autograd gives nothing."""
    xs = tuple(x.detach().requires_grad_() for x in xs)
    y = function(*xs)
    generator = torch.Generator().manual_seed(seed + 1)
    v = torch.randn(y.shape, generator=generator, dtype=torch.float64).to(y.dtype)
    grads = torch.autograd.grad(y, xs, v, create_graph=True, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, xs)]
    u = [torch.randn(x.shape, generator=generator, dtype=torch.float64).to(x.dtype) for x in xs]
    inner = sum((g * w).sum() for g, w in zip(grads, u) if g.requires_grad)
    second = torch.autograd.grad(inner, xs, allow_unused=True) if isinstance(inner, Tensor) else [None] * len(xs)
    second = [torch.zeros_like(x) if s is None else s for s, x in zip(second, xs)]
    flat = lambda ts: torch.cat([t.detach().reshape(-1).double() for t in ts])  # noqa: E731
    return {"value": y.detach().reshape(-1).double(), "gradient": flat(grads), "second order": flat(second)}


def _close(a: Tensor, b: Tensor, rtol: float, floor: Tensor) -> Tensor:
    """Element by element, |a − b| ≤ rtol·(|b| + rtol·(the largest finite |b|)) + floor:
    relative, with a floor where the values are round-off around 0."""
    finite = b[torch.isfinite(b)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    return (a - b).abs() <= rtol * (b.abs() + rtol * scale) + floor


def _clamps(case: Case, xs: tuple[Tensor, ...], eps: float) -> bool:
    """Whether some row's norm is below eps, so that the op clamps it."""
    for x in xs:
        rows = x.reshape(1) if x.dim() == 0 else x
        if bool((torch.linalg.vector_norm(rows, dim=case.dim % rows.dim()) < eps).any()):
            return True
    return False


def _floors(case: Case, xs: tuple[Tensor, ...], truth: dict[str, Tensor]) -> dict[str, Tensor]:
    """Round-off that the inputs' own precision already brings, element by element: how far the
    float64 truth moves when every input moves by a relative eps of the case's dtype. Where the
    answer is a cancellation (a gradient that is 0 but for round-off) this is as large as that
    round-off; where it is well-conditioned it is a few ulps. Never below the dtype's smallest
    normal number (differences among subnormals are their own round-off)."""
    info = torch.finfo(DTYPES[case.dtype])
    generator = torch.Generator().manual_seed(case.seed + 99)
    moved = tuple(x.double() * (1 + info.eps * torch.randn(x.shape, generator=generator, dtype=torch.float64)) for x in xs)
    shifted = derivatives(theirs(case, accurate=True), moved, case.seed)
    # and a few ulps of the values over the inputs' size per order, for answers that are 0 by
    # structure (a 0-d cosine's gradient), where moving the inputs moves nothing
    finite_y = truth["value"][torch.isfinite(truth["value"])]
    y = float(finite_y.abs().max()) if finite_y.numel() else 0.0
    flat = torch.cat([x.reshape(-1) for x in xs])
    nonzero = flat.abs()[(flat != 0) & torch.isfinite(flat)]
    size = float(nonzero.min()) if nonzero.numel() and OPS[case.op].scale_free else 1.0
    eps = dict(case.params).get("eps")
    if eps is not None and _clamps(case, xs, eps):  # a norm clamped at eps: terms grow like 1/eps
        size, y = min(size, eps), max(y, 1.0)
    ulps = 64 * info.eps * y
    structural = {"value": ulps, "gradient": ulps / size, "second order": ulps / size**2}
    return {what: 8 * (truth[what] - shifted[what]).abs().nan_to_num(0.0, 0.0, 0.0) + structural[what] + info.tiny for what in truth}


def check(case: Case) -> None:
    xs = case.inputs()
    upcast = tuple(x.double() for x in xs)
    got = derivatives(ours(case), xs, case.seed)
    want = derivatives(theirs(case), xs, case.seed)
    truth = derivatives(theirs(case, accurate=True), upcast, case.seed)
    rtol = RTOL[case.dtype]
    floors = _floors(case, upcast, truth)
    for what in ("value", "gradient", "second order"):
        a, b, t = got[what], want[what], truth[what]
        # PyTorch finite within rtol of the dtype's largest number: the overflow boundary, where
        # ours may round to ±inf instead
        edge = b.abs() * (1 + rtol) >= torch.finfo(DTYPES[case.dtype]).max
        defined = torch.isfinite(b) & ~edge
        assert torch.isfinite(a)[defined].all(), f"{what}: not finite where PyTorch is, {case}"
        near_pytorch = _close(a, b, rtol, floors[what])
        near_truth = _close(a, t, rtol, floors[what]) & torch.isfinite(t)
        # where PyTorch is itself off (its round-off in float16, say), ours may be off by as much
        as_near_as_pytorch = ((a - t).abs() <= (b - t).abs() + floors[what]) & torch.isfinite(t)
        bad = defined & ~(near_pytorch | near_truth | as_near_as_pytorch)
        assert not bad.any(), (f"{what}: ours {a[bad][:4].tolist()}, PyTorch {b[bad][:4].tolist()}, "
                               f"float64 {t[bad][:4].tolist()} ({case})")


# ---- drawing cases --------------------------------------------------------------------------------

SPECIALS = ("none", "none", "none", "zero row", "inf", "-inf", "nan")
EXAMPLES = int(os.environ.get("GRADIENT_LAB_FUZZ_EXAMPLES", "40"))  # drawn cases per Function; a campaign sets more


@st.composite
def cases(draw, op: str) -> Case:
    spec = OPS[op]
    ndim = draw(st.sampled_from((0, 1, 2, 2, 3)))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(ndim))
    dim = draw(st.integers(-max(ndim, 1), max(ndim, 1) - 1)) if spec.reduces else 0
    shapes = (shape,)
    if spec.inputs == 2:
        other = shape
        if ndim and draw(st.booleans()):  # broadcast: the second input has size 1 off the reduced dim
            d = dim % ndim
            other = tuple(1 if i != d else n for i, n in enumerate(shape))
        shapes = (shape, other)
    params = ()
    if op == "softplus":
        params = (("beta", draw(st.sampled_from((0.5, 1.0, 2.0)))), ("threshold", draw(st.sampled_from((5.0, 20.0)))))
    elif op in ("cosine", "normalize", "layernorm"):
        params = (("eps", draw(st.sampled_from((1e-12, 1e-8, 1e-5)))),)
    return Case(op, draw(st.sampled_from(tuple(DTYPES))), shapes, dim, 10.0 ** draw(st.integers(-30, 30)),
                draw(st.sampled_from(SPECIALS)), draw(st.integers(0, 2**16)), params)


def pinned(op: str) -> list[Case]:
    """The known extremes, always tried."""
    two = OPS[op].inputs == 2
    shapes = ((4, 8), (4, 8)) if two else ((4, 8),)
    eps = (("eps", 1e-8),) if op in ("cosine", "normalize", "layernorm") else ()
    extra = (("beta", 1.0), ("threshold", 20.0)) if op == "softplus" else eps
    dim = 1 if OPS[op].reduces else 0
    found = [Case(op, dtype, shapes, dim, scale, "none", 0, extra)
             for dtype in DTYPES for scale in (1e-30, 1e-3, 1.0, 1e3, 1e20, 1e30)]
    found += [Case(op, "float64", tuple(() for _ in shapes), 0 if OPS[op].reduces else 0, 1.0, "none", 1, extra),
              Case(op, "float64", tuple(() for _ in shapes), -1 if OPS[op].reduces else 0, 1.0, "none", 2, extra),
              Case(op, "float32", shapes, dim, 1.0, "zero row", 3, extra),
              Case(op, "float64", shapes, dim, 1.0, "nan", 4, extra),
              Case(op, "float64", shapes, dim, 1.0, "inf", 5, extra)]
    return found


def _with_pins(op: str):
    def decorate(test):
        for case in pinned(op):
            test = example(case=case)(test)
        return test

    return decorate


def _suite(op: str):
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=EXAMPLES <= 40)
    @_with_pins(op)
    @given(case=cases(op))
    def test(case: Case) -> None:
        check(case)

    test.__name__ = f"test_{op}_matches_pytorch_at_the_extremes"
    return test


for _op in OPS:
    globals()[f"test_{_op}_matches_pytorch_at_the_extremes"] = _suite(_op)


def test_cosine_is_right_where_pytorchs_norm_overflows():
    """float32 rows of norm 1e20: PyTorch gives 0 for parallel rows; ours gives 1."""
    x = torch.randn(3, 8) * 1e20
    assert (F.cosine_similarity(x, x, dim=1) == 0).all()  # PyTorch's own, inaccurate here
    torch.testing.assert_close(get_family("cosine").run("corrected", (x, x), dim=1), torch.ones(3), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dim", [0, -1])
def test_cosine_takes_0d_inputs_as_pytorch_does(dim):
    a, b = torch.tensor(2.0), torch.tensor(-3.0)
    got = get_family("cosine").run("corrected", (a, b), dim=dim)
    assert got.shape == () and got == F.cosine_similarity(a, b, dim=dim)


def test_cosine_promotes_mixed_dtypes_as_pytorch_does():
    a, b = torch.randn(3, 4), torch.randn(3, 4, dtype=torch.float64)
    got = get_family("cosine").run("corrected", (a, b), dim=1)
    want = F.cosine_similarity(a, b, dim=1)
    assert got.dtype == want.dtype == torch.float64
    torch.testing.assert_close(got, want)
