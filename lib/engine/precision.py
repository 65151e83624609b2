"""Low precision judged as kernel authors judge it: against the reference in the same precision.

A formula run in float32, bfloat16 or float16 is never exact, so "does it equal the truth?" is the
wrong question there. The question is "does it lose more than PyTorch's own ops lose in this
dtype?". So, as FlashAttention's tests do:

- the **truth** is float64, computed from the very values the formula saw (the dtype's inputs and
  upstream gradient, upcast), so rounding the inputs is never counted against the formula: autograd
  through the reference where the float64 verdict trusts it, else the formula's own float64
  backward (which that verdict has just checked against finite differences);
- the **baseline** is autograd through the reference run in the same dtype, or, without a
  reference, the float64 truth rounded to the dtype;
- the formula **passes** when its largest error is at most ``RATIO``× the baseline's plus a noise
  floor of ``FLOOR_EPS`` of the dtype's epsilon at the truth's scale, and its relative RMSE (as
  flash-linear-attention measures) at most ``RATIO``× the baseline's plus ``RMSE_FLOOR_EPS`` eps.
  An element the formula makes non-finite where the baseline is finite fails; one both make
  non-finite is PyTorch's own limit, counted and left out, as are kinks and a truth that is not
  finite.

Beside the verdict, from fresh draws of the inputs (``DRAWS`` seeds at the case's shape): the
tolerances ``torch.testing.assert_close`` needs to fail less often than ``FLAKE_RATE``, fitted to
the draws' largest errors by a generalized Pareto tail (``suggest_tolerance``), and the errors'
distribution (ULP histogram, error against magnitude) for formula and baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .evaluate import backward_products, forward_graph, vector_jacobian_products
from .report import ErrorStats, Failure, Precision, PrecisionResult, SuggestedTolerance
from .tolerances import round_up

Tensor = torch.Tensor
LOW_PRECISION = (torch.float32, torch.bfloat16, torch.float16)
RATIO = 2.0  # the formula's error may be this many times the baseline's (FlashAttention's k)
FLOOR_EPS = 1.0  # plus this many of the dtype's eps at the truth's scale: about two roundings of the largest value
RMSE_FLOOR_EPS = 0.25  # the relative RMSE's floor, in eps: about one rounding of every element (pure rounding gives 0.2)
PROBES = 2  # random upstreams beside the case's own
DRAWS = 64  # fresh input draws for the tolerances, at most (fewer for large inputs, never under MIN_DRAWS)
MIN_DRAWS = 16
DRAW_ELEMENTS = 2**20  # elements × draws the tolerance fit may spend
FLAKE_RATE = 1e-4  # the suggested tolerances fail at most this often
ULP_EDGES = np.array([0.0, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 2.0**16, math.inf])  # histogram bins, in ULPs
SAMPLE = 2000  # points of the error-against-magnitude scatter, per side
# torch.testing.assert_close's default rtol per dtype: the suggested tolerances keep it and fit atol
ASSERT_CLOSE_RTOL = {torch.float32: 1.3e-6, torch.bfloat16: 1.6e-2, torch.float16: 1e-3}


def is_low(dtype: torch.dtype) -> bool:
    return dtype in LOW_PRECISION


def upcast(values: Sequence[Any]) -> tuple:
    """Floating-point tensors in float64 on their own device; everything else as given."""
    return tuple(v.detach().double() if isinstance(v, Tensor) and v.is_floating_point() else v for v in values)


def shuffled_draw(given: Sequence[Any]) -> Callable[[int], tuple]:
    """Fresh draws where no input builder is known: each floating-point input's own values in a
    seeded random order (their distribution exactly, their arrangement new)."""
    def draw(seed: int) -> tuple:
        generator = torch.Generator().manual_seed(seed)
        return tuple(v.detach().reshape(-1)[torch.randperm(v.numel(), generator=generator).to(v.device)].reshape(v.shape)
                     if isinstance(v, Tensor) and v.is_floating_point() and v.numel() > 1 else v for v in given)
    return draw


# ---- the measures --------------------------------------------------------------------------------


def ulps(values: np.ndarray, truth: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """|values − truth| in units in the last place of the dtype at the truth (subnormal ones below
    its smallest normal)."""
    info = torch.finfo(dtype)
    exponent = np.floor(np.log2(np.maximum(np.abs(truth), info.tiny)))
    return np.abs(values - truth) / (info.eps * np.exp2(exponent))


def error_stats(values: np.ndarray, truth: np.ndarray, dtype: torch.dtype, tolerance: tuple[float, float] | None = None,
                seed: int = 0) -> ErrorStats:
    """One side's errors against the float64 truth (flat arrays of the compared elements)."""
    finite = np.isfinite(values)
    error = np.where(finite, np.abs(values - truth), math.inf)
    square = float(np.sum(truth**2))
    wrong = float(np.sum(np.where(finite, (values - truth) ** 2, math.inf)))
    rmse = math.sqrt(wrong / square) if square > 0 else (0.0 if wrong == 0 else math.inf)
    snr = math.inf if wrong == 0 else 10 * math.log10(square / wrong) if square > 0 and math.isfinite(wrong) else -math.inf
    distance = np.where(finite, ulps(values, truth, dtype), math.inf)
    counts = np.histogram(np.minimum(distance, 1e300), bins=np.minimum(ULP_EDGES, 1e301))[0] if distance.size else np.zeros(len(ULP_EDGES) - 1)
    mismatch = math.nan
    if tolerance is not None and error.size:
        atol, rtol = tolerance
        mismatch = float(np.mean(~(error <= atol + rtol * np.abs(truth))))
    pick = np.random.default_rng(seed).choice(error.size, SAMPLE, replace=False) if error.size > SAMPLE else np.arange(error.size)
    return ErrorStats(max_error=float(error.max(initial=0.0)), max_ulp=float(distance.max(initial=0.0)), rel_rmse=rmse, snr_db=snr,
                      mismatch=mismatch, ulp_counts=counts.astype(np.int64), non_finite=int((~finite).sum()),
                      sample_magnitude=np.abs(truth[pick]), sample_error=error[pick])


# ---- the tolerances a user can paste -------------------------------------------------------------


def exceedances(values: np.ndarray, truth: np.ndarray, rtol: float) -> np.ndarray:
    """Per element, |values − truth| − rtol·|truth|: the atol each element needs to pass
    ``assert_close(values, truth, rtol=rtol)`` (inf where a value is not finite and the truth is)."""
    return np.where(np.isfinite(values), np.abs(values - truth) - rtol * np.abs(truth), math.inf)


def suggest_tolerance(draws: Sequence[np.ndarray], dtype: torch.dtype, scales: Sequence[float] = (),
                      rate: float = FLAKE_RATE) -> SuggestedTolerance:
    """The tightest atol (rtol: assert_close's default for the dtype) with which a test of one draw
    fails less often than ``rate``, from each draw's per-element exceedances (``exceedances``).

    A test fails when its draw's largest exceedance passes atol. The rate asked lies beyond the
    draws, so it is extrapolated by extreme-value theory (peaks over a threshold): the draws'
    largest exceedances above their TAIL quantile follow a generalized Pareto law, fitted by
    probability-weighted moments (Hosking and Wallis 1987), its shape held to at most a heavy tail
    of index 2 (a few dozen points cannot tell a heavier one from noise); the quantile is the
    CONFIDENCE quantile of the fits to BOOTSTRAP resamples of the draws. Never under MARGIN times
    the largest seen, nor under FLOOR_ULPS eps at the draws' median scale; rounded up to two digits."""
    rtol = ASSERT_CLOSE_RTOL[dtype]
    worst = np.array([float(np.max(d, initial=-math.inf)) for d in draws], dtype=np.float64)
    count = int(worst.size)
    broken = int(np.isposinf(worst).sum())
    if not count or broken:
        return SuggestedTolerance(math.nan, rtol, rate, count, broken, broken)
    floor = FLOOR_ULPS * torch.finfo(dtype).eps * float(np.median(scales)) if len(scales) else 0.0
    worst = np.maximum(worst, 0.0)
    resampled = np.random.default_rng(count).choice(worst, (BOOTSTRAP, count))  # the fit's own uncertainty
    quantile = float(np.quantile([_pareto_quantile(np.sort(r), rate) for r in resampled], CONFIDENCE))
    atol = round_up(max(quantile, MARGIN * float(worst.max()), floor))
    return SuggestedTolerance(atol, rtol, rate, count, int((worst > atol).sum()), 0)


BOOTSTRAP = 200
CONFIDENCE = 0.95
TAIL = 0.75  # the threshold: the draws above this quantile of their largest exceedances make the tail
MARGIN = 2.0
FLOOR_ULPS = 2.0  # atol never under this many of eps at the draws' median scale: a rounding on each side of the comparison
HEAVIEST = -0.5  # Hosking's shape k at its heaviest (a Pareto tail of index 2)


def _pareto_quantile(ordered: np.ndarray, exceed: float) -> float:
    """The value exceeded with probability ``exceed`` by one more draw of a sample whose sorted
    values are ``ordered``: a generalized Pareto law fitted to the excesses over its TAIL quantile."""
    m = ordered.size
    k = m - int(TAIL * m)
    if k < 4:
        return float(ordered[-1]) if m else 0.0
    threshold = float(ordered[m - k - 1])
    excess = ordered[m - k:] - threshold  # ascending
    a0 = float(excess.mean())
    if a0 <= 0:
        return threshold
    plotting = (np.arange(1, k + 1) - 0.35) / k
    a1 = float(np.mean((1 - plotting) * excess))
    shape = a0 / (a0 - 2 * a1) - 2  # Hosking's k: > 0 a bounded tail, < 0 a heavy one
    if shape < HEAVIEST:
        shape = HEAVIEST
    sigma = a0 * (1 + shape)  # the mean excess of a generalized Pareto law is sigma / (1 + k)
    q = min(1.0, exceed * m / k)  # the exceedance probability beyond the threshold
    if abs(shape) < 1e-6:
        return threshold - sigma * math.log(q)
    return threshold + sigma / shape * (1 - q**shape)


# ---- the verdict ---------------------------------------------------------------------------------


def judge_values(name: str, values: np.ndarray, baseline: np.ndarray, truth: np.ndarray, dtype: torch.dtype, baseline_kind: str,
                 tolerance: tuple[float, float] | None, left_out: np.ndarray | None = None, k: float = RATIO,
                 shape: tuple[int, ...] = (), per: int = 0) -> PrecisionResult:
    """The rule for one input's gradient (or the output), pooled over the probes (flat arrays of
    ``per`` elements each): where the formula is worst, and where it is first not finite, by flat index."""
    keep = np.isfinite(truth) & ~(~np.isfinite(values) & ~np.isfinite(baseline))  # both non-finite: PyTorch's own limit
    if left_out is not None:
        keep &= ~left_out
    per = per or max(values.size, 1)
    broken = np.flatnonzero(keep & ~np.isfinite(values))
    gap = np.where(keep, np.abs(values - truth), -1.0)
    gap = np.where(np.isnan(gap), np.inf, gap)
    worst = int(np.argmax(gap)) % per if gap.size else -1
    first = int(broken[0]) % per if broken.size else -1
    values, baseline, truth = values[keep], baseline[keep], truth[keep]
    eps = torch.finfo(dtype).eps
    scale = float(np.abs(truth).max(initial=0.0))
    formula, base = error_stats(values, truth, dtype, tolerance), error_stats(baseline, truth, dtype, tolerance, seed=1)
    floor = FLOOR_EPS * eps * scale
    allowed = k * base.max_error + floor
    allowed_rmse = k * base.rel_rmse + RMSE_FLOOR_EPS * eps
    passed = formula.max_error <= allowed and formula.rel_rmse <= allowed_rmse
    return PrecisionResult(name=name, formula=formula, baseline=base, baseline_kind=baseline_kind, scale=scale, floor=floor,
                           allowed=allowed, allowed_rmse=allowed_rmse, passed=bool(passed), compared=int(keep.sum()),
                           left_out=int(keep.size - keep.sum()), shape=tuple(shape), worst=worst, first_non_finite=first)


def _rounded(truth: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    return torch.from_numpy(truth).to(dtype).double().numpy()


def _flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays]) if arrays else np.zeros(0)


def _output(function: Callable[..., Tensor], inputs: Sequence[Tensor]) -> np.ndarray:
    with torch.no_grad():
        return function(*inputs).detach().to(device="cpu", dtype=torch.float64).numpy(force=True).copy()


@dataclass(frozen=True)
class _Sides:
    """One point's gradients (per input, per upstream) and outputs, by side."""

    formula: list[list[np.ndarray]]
    baseline: list[list[np.ndarray]]
    truth: list[list[np.ndarray]]
    outputs: tuple[np.ndarray, np.ndarray, np.ndarray]  # formula, baseline, truth


def _products(function: Callable[..., Tensor], inputs: Sequence[Tensor], upstreams: Sequence[Tensor]) -> tuple[list, np.ndarray]:
    """Per upstream, per input, uᵀJ in float64 (zeros where backward gave none), and the output: one
    forward call's graph for every upstream (``vector_jacobian_products`` on it, by plain calls)."""
    graph = forward_graph(function, inputs)
    per_input = vector_jacobian_products(function, inputs, torch.stack(list(upstreams)), batched=False, graph=graph)
    found = [[p[k].numpy() for p in per_input] for k in range(len(upstreams))]
    return found, graph[1].detach().to(device="cpu", dtype=torch.float64).numpy(force=True).copy()


def _point(low, exact, by_reference: Sequence[bool], upstreams: Sequence[Tensor], has_baseline: bool) -> _Sides:
    """Formula and baseline in the dtype, truth in float64, at one point, for each upstream (given in
    the dtype; the truth gets it upcast). Raises FormulaError where the formula raises."""
    dtype = low.inputs[0].dtype
    n = len(low.inputs)
    formula: list[list[np.ndarray]] = [[] for _ in range(n)]
    baseline: list[list[np.ndarray]] = [[] for _ in range(n)]
    truth: list[list[np.ndarray]] = [[] for _ in range(n)]
    exact_upstreams = [u.double() for u in upstreams]
    mine, y = _products(low.function, low.inputs, upstreams)
    true_reference = _products(exact.reference, exact.inputs, exact_upstreams) if exact.reference is not None else None
    true_own = _products(exact.function, exact.inputs, exact_upstreams) if not all(by_reference) else None
    theirs = _products(low.reference, low.inputs, upstreams) if has_baseline else None
    for k in range(len(upstreams)):
        for i in range(n):
            source = true_reference if by_reference[i] else true_own
            assert source is not None  # the reference where it is the truth, else the formula's own in float64
            t = source[0][k][i]
            formula[i].append(mine[k][i])
            truth[i].append(t)
            baseline[i].append(theirs[0][k][i] if theirs is not None and by_reference[i] else _rounded(t, dtype))
    y_true = known[1] if (known := true_reference or true_own) is not None else _output(exact.function, exact.inputs)
    y_base = theirs[1] if theirs is not None else _rounded(y_true, dtype)
    return _Sides(formula, baseline, truth, (y, y_base, y_true))


def _upstreams(low, seed: int, own: Tensor | None, probes: int, shape: tuple[int, ...] | None = None) -> list[Tensor]:
    """The case's own upstream (where given) and ``probes`` seeded standard-normal ones, in the dtype,
    of the output's ``shape`` (read from a forward call where neither it nor ``own`` gives it)."""
    if shape is None and own is not None:
        shape = tuple(own.shape)
    if shape is None:
        with torch.no_grad():
            shape = tuple(low.function(*low.inputs).shape)
    dtype, device = low.inputs[0].dtype, low.inputs[0].device
    generator = torch.Generator().manual_seed(seed + 7919)
    drawn = [torch.randn(tuple(shape), generator=generator, dtype=torch.float64).to(device=device, dtype=dtype) for _ in range(probes)]
    return ([own.detach().to(device=device, dtype=dtype)] if own is not None else []) + drawn


def _loss_upstream(low) -> Tensor:
    """d loss / d output at the formula's output, in the dtype (the upstream a user's loss hands backward)."""
    with torch.no_grad():
        y = low.function(*low.inputs)
    leaf = y.detach().requires_grad_()
    with torch.enable_grad():
        (u,) = torch.autograd.grad(low.loss(leaf), leaf)
    return u.detach()


def _baseline_runs(low) -> bool:
    """Whether autograd through the reference runs in the dtype (some ops have no float16 kernel on the CPU)."""
    if low.reference is None:
        return False
    try:
        backward_products(low.reference, low.inputs, None, None)
        return True
    except Exception:  # noqa: BLE001 - the reference is user code too: then rounding is the baseline
        return False


def draws_for(elements: int, draws: int = DRAWS) -> int:
    return max(MIN_DRAWS, min(draws, DRAW_ELEMENTS // max(elements, 1)))


def check_precision(low, exact, *, by_reference: Sequence[bool], kinks: Sequence[np.ndarray] = (), upstream: Tensor | None = None,
                    seed: int = 0, draws: int = DRAWS, k: float = RATIO, role: str = "reference") -> Precision:
    """The precision verdict of ``low`` (a Problem in a dtype of ``LOW_PRECISION``) against
    ``exact`` (the same Problem on its values upcast to float64; see the module's docstring).
    ``by_reference``: per input, whether the float64 verdict trusts the reference there (else the
    formula's own float64 backward is the truth and the truth rounded is the baseline); ``kinks``:
    per input, elements left out (one-sided derivatives differ there); ``upstream``: the case's own
    upstream gradient, judged beside ``PROBES`` random ones."""
    dtype = low.inputs[0].dtype
    device = str(low.inputs[0].device)
    has_baseline = _baseline_runs(low)
    kind = ("surrogate" if role == "surrogate" else "reference") if has_baseline else "rounding"
    names = low.names
    try:
        sides = _point(low, exact, by_reference, _upstreams(low, seed, upstream, PROBES), has_baseline)
    except Exception as error:  # noqa: BLE001 - the code under test raised in the dtype (its forward or backward): the formula's
        failure = Failure.of("backward", error)
        return Precision(dtype=_name(dtype), device=device, truth_device=str(exact.inputs[0].device), k=k, results=(), output=None,
                         probes=0, draws=0, baseline_kind=kind, failure=f"the formula raised {failure.unconditioned}")
    tolerances = _tolerances(low, exact, by_reference, has_baseline, seed, draws)
    results = []
    for i, name in enumerate(names):
        per = len(sides.truth[i])
        left = np.zeros(low.inputs[i].numel(), dtype=bool)
        if i < len(kinks) and np.size(kinks[i]):
            left[np.asarray(kinks[i], dtype=np.int64)] = True
        which = kind if by_reference[i] else "rounding"
        mine, base = tolerances[i] if tolerances else (None, None)
        at = (base.atol, base.rtol) if base is not None and math.isfinite(base.atol) else None
        result = judge_values(name, _flat(sides.formula[i]), _flat(sides.baseline[i]), _flat(sides.truth[i]), dtype, which, at,
                              np.tile(left, per), k, tuple(low.inputs[i].shape), low.inputs[i].numel())
        results.append(replace(result, tolerance=mine, baseline_tolerance=base))
    y, y_base, y_true = sides.outputs
    output = judge_values("output", y.reshape(-1), y_base.reshape(-1), y_true.reshape(-1), dtype,
                          kind if low.reference is not None else "rounding", None, None, k, tuple(y.shape), y.size)
    return Precision(dtype=_name(dtype), device=device, truth_device=str(exact.inputs[0].device), k=k, results=tuple(results),
                     output=output, probes=len(sides.truth[0]) if sides.truth else 0, draws=_draws_of(tolerances),
                     baseline_kind=kind)


def _draws_of(tolerances) -> int:
    return max((t.draws for pair in tolerances for t in pair if t is not None), default=0)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tolerances(low, exact, by_reference, has_baseline: bool, seed: int, draws: int) -> list[tuple[SuggestedTolerance, SuggestedTolerance]]:
    """Per input, the suggested tolerances for the formula and for the baseline, from fresh draws
    of the inputs (``Problem.draw``, else the given values shuffled), each judged for a random
    upstream and the loss's, against the float64 truth and against the baseline both (a user's
    test may take either as its reference)."""
    if low.remake is None or exact.remake is None:
        return []
    dtype = low.inputs[0].dtype
    rtol = ASSERT_CLOSE_RTOL[dtype]
    draw = low.draw if low.draw is not None else shuffled_draw(low.given)
    count = draws_for(sum(x.numel() for x in low.inputs), draws)
    n = len(low.inputs)
    needed: dict[str, list[list[np.ndarray]]] = {"formula": [[] for _ in range(n)], "baseline": [[] for _ in range(n)]}
    scales: list[list[float]] = [[] for _ in range(n)]
    for d in range(count):
        try:
            given = draw(seed + 1000 + d)
            p, e = low.remake(given), exact.remake(upcast(given))
            if p.failure is not None or e.failure is not None:
                continue
            loss_upstream = _loss_upstream(p)
            upstreams = [loss_upstream] + _upstreams(p, seed + d, None, 1, tuple(loss_upstream.shape))
            sides = _point(p, e, by_reference, upstreams, has_baseline)
        except Exception:  # noqa: BLE001 - a draw the code under test cannot take is left out, not a verdict
            continue
        for i in range(n):
            t, f, b = _flat(sides.truth[i]), _flat(sides.formula[i]), _flat(sides.baseline[i])
            finite = np.isfinite(t)
            t, f, b = t[finite], f[finite], b[finite]
            mine = exceedances(f, t, rtol)
            needed["formula"][i].append(np.maximum(mine, exceedances(f, b, rtol)) if has_baseline and by_reference[i] else mine)
            needed["baseline"][i].append(exceedances(b, t, rtol))
            scales[i].append(float(np.abs(t).max(initial=0.0)))
    return [(suggest_tolerance(needed["formula"][i], dtype, scales[i]), suggest_tolerance(needed["baseline"][i], dtype, scales[i]))
            for i in range(n)]
