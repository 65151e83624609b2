"""Whether the backward gives the same answer twice, and the same answer for a row alone or in a batch.

- **Determinism**: the formula's backward ``RUNS`` times on the same inputs and upstream, no random
  generator reseeded between runs (a backward that draws random numbers, or atomics that reorder
  an accumulation, must show): bitwise equal or not; where not, which elements vary, by how much,
  in how many bits, and a ``nondet_tol`` for ``torch.autograd.gradcheck``, tried there.
- **Batch invariance**: a row's gradient computed alone, inside the case's batch and inside a batch
  of other companions: bitwise equal, equal within rounding, or different (with the rows and the
  size). A Function whose gradient truly depends on its batch (batch norm) is declared so
  (``declare(..., batch_invariant=False)``) and not flagged.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

from .evaluate import backward_products
from .report import BatchInvariance, Determinism, RowComparison, Spread
from .signature import name_element
from .tolerances import round_up

Tensor = torch.Tensor
RUNS = 10
ROUNDING_EPS = 16  # "within rounding": at most this many eps of the row's largest |gradient| apart
GRADCHECK_ELEMENTS = 4096  # gradcheck builds whole Jacobians: the nondet_tol is tried on inputs up to this size
_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def _upstream(problem, seed: int) -> Tensor:
    with torch.no_grad():
        y = problem.function(*problem.inputs)
    return torch.randn(tuple(y.shape), generator=torch.Generator().manual_seed(seed + 99991), dtype=torch.float64).to(y)


def _bits(values: np.ndarray, first: np.ndarray, dtype: torch.dtype) -> int:
    """The most bits in which one element differs from the first run's, in the dtype's own encoding."""
    kind = _BITS.get(dtype, torch.int64)
    a = torch.from_numpy(np.ascontiguousarray(values)).to(dtype).view(kind).numpy()
    b = torch.from_numpy(np.ascontiguousarray(first)).to(dtype).view(kind).numpy()
    xor = np.bitwise_xor(a, b).view(np.uint8).reshape(a.size, -1)
    return int(np.unpackbits(xor, axis=1).sum(axis=1).max(initial=0))


def check_determinism(problem, exact=None, runs: int = RUNS, seed: int = 0) -> Determinism:
    """The backward ``runs`` times (see the module). ``exact``: the same problem in float64, where
    the nondet_tol is tried by gradcheck (the problem itself where it is float64 already)."""
    dtype = problem.inputs[0].dtype
    u = _upstream(problem, seed)
    results = [backward_products(problem.function, problem.inputs, None, u) for _ in range(max(runs, 2))]
    spreads = []
    for i, name in enumerate(problem.names):
        stack = np.stack([r[i].reshape(-1) for r in results])
        first = stack[0]
        same = np.all((stack == first) | (np.isnan(stack) & np.isnan(first)), axis=0)
        varying = np.flatnonzero(~same)
        spread = np.nanmax(stack, axis=0) - np.nanmin(stack, axis=0) if stack.size else np.zeros(0)
        bits = max((_bits(row, first, dtype) for row in stack[1:]), default=0) if varying.size else 0
        worst = int(np.argmax(np.where(np.isfinite(spread), spread, -1))) if varying.size else -1
        spreads.append(Spread(name=name, shape=tuple(problem.inputs[i].shape), varying=varying, spread=spread.reshape(problem.inputs[i].shape),
                              max_spread=float(spread.max(initial=0.0)), bits=bits,
                              worst=name_element(name, tuple(problem.inputs[i].shape), worst) if worst >= 0 else ""))
    deterministic = all(s.varying.size == 0 for s in spreads)
    tolerance, passes, why = math.nan, None, ""
    if not deterministic:
        exact = exact if exact is not None else problem
        measured = spreads if exact is problem else check_determinism(exact, None, runs, seed).spreads
        tolerance = round_up(2 * max((s.max_spread for s in measured), default=0.0), digits=1) or 1e-12
        passes, why = _gradcheck_passes(exact, tolerance)
    return Determinism(runs=len(results), deterministic=deterministic, spreads=tuple(spreads), nondet_tol=tolerance, gradcheck=passes,
                       gradcheck_message=why, dtype=str(dtype).removeprefix("torch."), device=str(problem.inputs[0].device))


def _gradcheck_passes(exact, tolerance: float) -> tuple[bool | None, str]:
    """Whether gradcheck (slow mode, float64) passes with ``nondet_tol=tolerance``, and why not
    (its own first line); None: too large to try."""
    if sum(x.numel() for x in exact.inputs) > GRADCHECK_ELEMENTS:
        return None, ""
    xs = tuple(x.detach().double().requires_grad_() for x in exact.inputs)
    try:
        torch.autograd.gradcheck(exact.function, xs, nondet_tol=tolerance, fast_mode=False)
        return True, ""
    except Exception as error:  # noqa: BLE001 - gradcheck's own failure, or the code under test raising inside it
        return False, (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


# ---- batch invariance ----------------------------------------------------------------------------------


def _batched(given: Sequence[Any], batch: int):
    return [isinstance(x, Tensor) and x.dim() >= 1 and x.shape[0] == batch for x in given]


def check_batch_invariance(problem, seed: int = 0, declared: bool = True, rows: int = 2, noise: float = 0.0) -> BatchInvariance:
    """Rows 0 and the last (``rows`` of them) alone, in the case's batch, and among other companions
    (a fresh draw, ``Problem.draw``, else standard normals, with upstreams of their own), for the
    same upstream row. ``noise``:
    the backward's own run-to-run spread, within which rows count as the same."""
    first = problem.inputs[0] if problem.inputs else None
    batch = int(first.shape[0]) if isinstance(first, Tensor) and first.dim() >= 1 else 0
    if not declared:
        return BatchInvariance("declared", "declared batch-dependent (batch_invariant=False): not checked")
    if problem.remake is None or batch < 2:
        return BatchInvariance("not applicable", "no batch of two rows or more to compare a row in")
    given = problem.given
    in_batch = _batched(given, batch)
    u = _upstream(problem, seed)
    if u.dim() < 1 or u.shape[0] != batch:
        return BatchInvariance("not applicable", "the output has no batch dimension to take a row of")
    full = backward_products(problem.function, problem.inputs, None, u)
    companions = _companions(problem, given, in_batch, batch, seed)
    eps = torch.finfo(problem.inputs[0].dtype).eps  # ``first``: a batch of two rows or more
    compared = []
    for r in sorted({0, batch - 1})[:rows]:
        alone = problem.remake(tuple(x[r:r + 1] if b else x for x, b in zip(given, in_batch)))
        single = backward_products(alone.function, alone.inputs, None, u[r:r + 1])
        mixed_given = tuple(torch.cat([c[:r], x[r:r + 1], c[r + 1:]]) if b else x for x, c, b in zip(given, companions, in_batch))
        mixed = problem.remake(mixed_given)
        others = torch.randn(tuple(u.shape), generator=torch.Generator().manual_seed(seed + 7177 + r), dtype=torch.float64).to(u)
        among = backward_products(mixed.function, mixed.inputs, None, torch.cat([others[:r], u[r:r + 1], others[r + 1:]]))  # their own upstreams
        wrt = problem.signature.wrt if problem.signature is not None else tuple(range(len(problem.inputs)))
        for i, name in enumerate(problem.names):
            if not in_batch[wrt[i]]:  # a weight shared by the rows sums over them: its gradient is the batch's by design
                continue
            here = full[i][r]
            for where, other in (("alone", single[i][0]), ("among other rows", among[i][r])):
                gap = float(np.nanmax(np.abs(other - here))) if here.size else 0.0
                scale = float(np.nanmax(np.abs(here))) if here.size else 0.0
                kind = ("bitwise" if np.array_equal(other, here, equal_nan=True) else
                        "rounding" if gap <= max(ROUNDING_EPS * eps * max(scale, np.finfo(float).tiny), 2 * noise) else "different")
                compared.append(RowComparison(row=r, input=name, where=where, outcome=kind, difference=gap, scale=scale))
    different = [c for c in compared if c.outcome == "different"]
    if different:
        worst = max(different, key=lambda c: c.difference / max(c.scale, 1e-300))
        rows_named = sorted({c.row for c in different})
        return BatchInvariance("different", f"the gradient of row{'s' * (len(rows_named) > 1)} {' and '.join(map(str, rows_named))} "
                               f"changes with its batch: {worst.where}, "
                               f"the gradient of {worst.input}[{worst.row}] moves by {worst.difference:.3g} (its largest |value| "
                               f"{worst.scale:.3g})", tuple(compared))
    outcome = "bitwise" if all(c.outcome == "bitwise" for c in compared) else "rounding"
    words = ("bitwise the same alone, in its batch and among other rows" if outcome == "bitwise" else
             "the same within rounding alone, in its batch and among other rows (not bitwise)")
    return BatchInvariance(outcome, f"rows {', '.join(str(r) for r in sorted({0, batch - 1}))}: {words}", tuple(compared))


def _companions(problem, given, in_batch, batch: int, seed: int):
    """Other rows for the batch: a fresh draw of the case's inputs, else standard normals."""
    if problem.draw is not None:
        try:
            drawn = problem.draw(seed + 4099)
            if all(not b or (isinstance(d, Tensor) and d.shape == x.shape) for d, x, b in zip(drawn, given, in_batch)):
                return drawn
        except Exception:  # noqa: BLE001 - the builder is the user's too: then normals
            pass
    generator = torch.Generator().manual_seed(seed + 4099)
    return tuple(torch.randn(tuple(x.shape), generator=generator, dtype=torch.float64).to(x) if b and x.is_floating_point() else x
                 for x, b in zip(given, in_batch))
