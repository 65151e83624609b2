"""The whole-Jacobian verdict: every entry of a formula's Jacobian against the truth, at the cost
of a few evaluations, and a sentence that says what was covered.

One vector-Jacobian product (the loss's gradient) cannot see a backward that ignores, reduces or
mixes ``grad_output``. So the check compares the Jacobian itself:

- **entries on the pattern**, one by one. The truth's pattern (the reference's structure, verified
  at the point by ``lib.numerical``) tells which outputs share no input element; such outputs go
  in one backward call (the rows are coloured, as the columns are for finite differences). For
  cosine, all 64 outputs of a 64×128 pair share one call.
- **every entry, by random probes**: for two or more seeded random upstream vectors u, the
  formula's own backward uᵀJ (plain calls, nothing compressed) against uᵀJ of the truth. They
  catch entries outside the pattern and bugs that only mix outputs.

The truth is finite differences of the formula's forward and, where the family has one, autograd
through the reference. Entries where no truth is finite are left out, counted and named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from lib.numerical import DEFAULT_BUDGET_BYTES, DifferencePlan, color_columns, numerical_entries
from lib.tolerances import Tolerances

Tensor = torch.Tensor
PROBES = 2
TRUTHS = ("reference", "numerical")


# ---- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputEntries:
    """One input's Jacobian entries that were compared one by one, per source."""

    name: str
    shape: tuple[int, ...]
    rows: np.ndarray  # output element of each entry (flat index)
    cols: np.ndarray  # input element of each entry (flat index)
    values: dict[str, np.ndarray]  # source -> value of each entry


@dataclass(frozen=True)
class Probe:
    """uᵀJ for one random upstream vector u, per source and input (flat)."""

    upstream: np.ndarray
    products: dict[str, tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class Coverage:
    """What a verdict covered, in numbers, and in words (``describe``)."""

    entries: int  # every entry of every input's Jacobian
    structural: int  # entries of the truth's pattern
    compared: int  # of those, compared one by one
    excluded: int  # of those, left out because no truth is finite there
    excluded_where: tuple[str, ...]  # the first few, named
    backward_calls: int
    forward_evaluations: int
    probes: int
    probed: int  # elements of uᵀJ compared, over all probes (those whose truth is finite)
    pattern_source: str  # where the pattern came from
    truths: tuple[str, ...] = ("numerical",)  # what the formula was compared with
    partial: str = ""  # why the pattern's entries were not compared one by one, if not

    @property
    def empty(self) -> bool:
        """Nothing was compared: no verdict can be given."""
        return self.compared == 0 and self.probed == 0

    def describe(self) -> str:
        rest = self.entries - self.structural
        how = f"by {self.backward_calls:,} backward call{'s' * (self.backward_calls != 1)} and {self.forward_evaluations:,} forward evaluations"
        ones = (f"the {self.structural:,} structurally nonzero ones" if not self.excluded else
                f"{self.compared:,} of the {self.structural:,} structurally nonzero ones")
        if self.partial:
            text = (f"{self.entries:,} Jacobian entries by {self.probes} random probes only; "
                    f"the {self.structural:,} structurally nonzero ones were not compared one by one: {self.partial}")
        elif rest:
            text = f"all {self.entries:,} Jacobian entries: {ones} one by one, {how}, the other {rest:,} by {self.probes} random probes"
        else:
            text = f"all {self.entries:,} Jacobian entries: {ones} one by one, {how}, and all by {self.probes} random probes"
        against = " and ".join({"reference": "autograd through the reference", "numerical": "finite differences"}[t] for t in self.truths)
        text += f", against {against}"
        if self.excluded:
            where = ", ".join(self.excluded_where) + ("…" if self.excluded > len(self.excluded_where) else "")
            text += f"; {self.excluded:,} left out because the truth is not finite there ({where})"
        return text


@dataclass(frozen=True)
class JacobianVerdict:
    passed: bool
    finding: str  # the worst entry or probe out of tolerance, in words; "" when it passed
    coverage: Coverage
    entries: tuple[InputEntries, ...]
    probes: tuple[Probe, ...]

    @property
    def outcome(self) -> str:
        return "no verdict" if self.coverage.empty else "pass" if self.passed else "fail"

    @property
    def summary(self) -> str:
        covered = self.coverage.describe()
        if self.coverage.empty:
            return f"no verdict: the truth is not finite anywhere, so nothing could be compared ({covered})"
        return f"passes: {covered}" if self.passed else f"fails: {self.finding} (checked {covered})"


# ---- comparing values against the truth -------------------------------------------------------------


def compare_entries(analytic: np.ndarray, truths: dict[str, np.ndarray], tolerances: Tolerances) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Per entry: (excess over tolerance, left out, the truth it was worst against).

    An entry is left out where no truth is finite, or where the analytic value and the reference
    are both non-finite (the formula agrees with PyTorch there). Elsewhere it fails against every
    finite truth it differs from by more than atol + rtol·|truth|, and wherever it is not finite
    itself. ``excess`` > 0 marks a failure; +inf an analytic value that is not finite."""
    a = analytic
    finite_a = np.isfinite(a)
    reference = truths.get("reference")
    agrees_with_pytorch = ~finite_a & ~np.isfinite(reference) if reference is not None else np.zeros(a.shape, dtype=bool)
    any_truth = np.zeros(a.shape, dtype=bool)
    excess = np.full(a.shape, -np.inf)
    against = np.full(a.shape, "", dtype=object)
    for name, truth in truths.items():
        usable = np.isfinite(truth) & ~agrees_with_pytorch
        any_truth |= np.isfinite(truth)
        with np.errstate(invalid="ignore"):
            gap = np.where(finite_a, np.abs(a - truth) - (tolerances.atol + tolerances.rtol * np.abs(truth)), np.inf)
        gap = np.where(usable, gap, -np.inf)
        worse = gap > excess
        excess = np.where(worse, gap, excess)
        against = np.where(worse, name, against)
    left_out = ~any_truth | agrees_with_pytorch
    worst = int(np.argmax(excess)) if excess.size else 0
    return excess, left_out, (against.flat[worst] if excess.size and excess.flat[worst] > 0 else None)


def _index(flat: int, shape: tuple[int, ...]) -> str:
    return ", ".join(map(str, np.unravel_index(flat, shape))) if shape else ""


# ---- vector-Jacobian products --------------------------------------------------------------------------


def _vjps(function, inputs: Sequence[Tensor], upstreams: Tensor, batched: bool) -> list[Tensor]:
    """uᵀJ for each u in ``upstreams`` (k, *output shape): per input, (k, elements)."""
    xs = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        y = function(*xs)
        upstreams = upstreams.to(dtype=y.dtype, device=y.device)
        grads = None
        if batched and upstreams.shape[0] > 1:
            try:
                grads = torch.autograd.grad(y, xs, upstreams, retain_graph=True, is_grads_batched=True, allow_unused=True)
            except Exception:  # noqa: BLE001 - a backward that vmap cannot run: one call per vector
                grads = None
        if grads is None:
            per = [torch.autograd.grad(y, xs, u, retain_graph=True, allow_unused=True) for u in upstreams]
            grads = [None if all(g[i] is None for g in per) else
                     torch.stack([g[i] if g[i] is not None else torch.zeros_like(x) for g in per]) for i, x in enumerate(xs)]
    k = upstreams.shape[0]
    return [torch.zeros(k, x.numel(), dtype=torch.float64) if g is None else torch.from_numpy(g.detach().reshape(k, -1).double().cpu().numpy(force=True).copy())
            for g, x in zip(grads, xs)]


def row_colors(patterns: Sequence[tuple[np.ndarray, np.ndarray]], sizes: Sequence[int], n_outputs: int) -> np.ndarray:
    """A colour per output such that outputs of one colour share no input element, in any input."""
    offsets = np.cumsum([0, *sizes[:-1]])
    rows = np.concatenate([r for r, _ in patterns]) if patterns else np.zeros(0, dtype=np.int64)
    cols = np.concatenate([c + o for (_, c), o in zip(patterns, offsets)]) if patterns else np.zeros(0, dtype=np.int64)
    return color_columns(cols, rows, n_outputs)  # the transposed pattern: rows become columns


def compressed_entries(function, inputs, patterns, colors: np.ndarray, skip: np.ndarray, output_shape, budget_bytes: int,
                       batched: bool = True) -> list[np.ndarray]:
    """Each input's Jacobian entries on its pattern, from one backward call per row colour."""
    m, groups = colors.size, int(colors.max()) + 1 if colors.size else 0
    n = sum(x.numel() for x in inputs)
    chunk = max(1, budget_bytes // max(8 * (m + 2 * n), 1))
    values = [np.zeros(r.size) for r, _ in patterns]
    live = np.ones(m, dtype=bool)
    live[skip] = False
    for first in range(0, groups, chunk):
        k = min(chunk, groups - first)
        basis = torch.zeros(k, m, dtype=torch.float64)
        rows = np.nonzero(live & (colors >= first) & (colors < first + k))[0]
        basis[torch.from_numpy(colors[rows] - first), torch.from_numpy(rows)] = 1.0
        products = _vjps(function, inputs, basis.reshape(k, *output_shape), batched)
        for (r, c), out, product in zip(patterns, values, products):
            hit = (colors[r] >= first) & (colors[r] < first + k)
            out[hit] = product.numpy()[colors[r[hit]] - first, c[hit]]
    return values


def numerical_product(rows, cols, values, u: np.ndarray, n: int) -> np.ndarray:
    """uᵀJ from the numerical entries; NaN where an element feeds an output that is not finite."""
    with np.errstate(invalid="ignore"):
        return np.bincount(cols, weights=values * u[rows], minlength=n).astype(np.float64)  # float even when empty


# ---- the verdict ---------------------------------------------------------------------------------


def check_jacobian(
    function: Callable[..., Tensor],
    reference: Callable[..., Tensor] | None,
    inputs: Sequence[Tensor],
    names: Sequence[str],
    plans: Sequence[DifferencePlan],
    tolerances: Tolerances,
    *,
    truth: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
    probes: int = PROBES,
    seed: int = 0,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    work_limit: float = math.inf,
) -> JacobianVerdict:
    """The formula's whole Jacobian against the truth (see the module's docstring); ``truth``:
    the numerical entries per input, when the caller has them already."""
    with torch.no_grad():
        output = function(*inputs)
    shape, m = tuple(output.shape), output.numel()
    skip = plans[0].skip_rows if plans else np.zeros(0, dtype=np.int64)
    sizes = [x.numel() for x in inputs]
    if truth is None:  # (rows, cols, values) of the numerical Jacobian, per input
        truth = [numerical_entries(function, inputs, p, tolerances.step, budget_bytes) for p in plans]
    patterns = [(r, c) for r, c, _ in truth]
    colors = row_colors(patterns, sizes, m)
    groups = int(colors.max()) + 1 if colors.size else 0
    partial = ""
    if groups * sum(sizes) > work_limit:
        partial = f"{groups:,} backward calls would exceed the work limit"

    entries: list[InputEntries] = []
    if not partial:
        sources = {"analytic": lambda batched: compressed_entries(function, inputs, patterns, colors, skip, shape, budget_bytes, batched)}
        if reference is not None:
            sources["reference"] = lambda batched: compressed_entries(reference, inputs, patterns, colors, skip, shape, budget_bytes, batched)
        found = {name: compute(True) for name, compute in sources.items()}
        entries = _entries(names, inputs, truth, found, skip)
        if not _entries_pass(entries, tolerances):  # a failure must hold with plain calls, not only under vmap
            found = {name: compute(False) for name, compute in sources.items()}
            entries = _entries(names, inputs, truth, found, skip)

    generator = torch.Generator().manual_seed(seed + 7919)
    upstreams = torch.randn((probes, *shape), generator=generator, dtype=torch.float64)
    upstreams.reshape(probes, -1)[:, torch.from_numpy(skip)] = 0.0
    products = {"analytic": _vjps(function, inputs, upstreams, batched=False)}
    if reference is not None:
        products["reference"] = _vjps(reference, inputs, upstreams, batched=False)
    flat_u = upstreams.reshape(probes, -1).numpy()
    products["numerical"] = [torch.from_numpy(np.stack([numerical_product(r, c, v, u, n) for u in flat_u])) for (r, c, v), n in zip(truth, sizes)]
    probe_list = tuple(
        Probe(flat_u[k], {source: tuple(p[k].numpy() for p in per_input) for source, per_input in products.items()})
        for k in range(probes)
    )

    finding = _worst_entry(entries, shape, tolerances) or _worst_probe(probe_list, names, inputs, tolerances)
    structural = sum(r.size for r, _ in patterns)
    excluded, where = _excluded(entries, shape, tolerances)
    probed = sum(int((~compare_entries(p.products["analytic"][i], _truths({s: v[i] for s, v in p.products.items()}), tolerances)[1]).sum())
                 for p in probe_list for i in range(len(inputs)))
    coverage = Coverage(
        entries=m * sum(sizes),
        structural=structural,
        compared=0 if partial else structural - excluded,
        excluded=excluded,
        excluded_where=where,
        backward_calls=0 if partial else groups,
        forward_evaluations=sum(p.evaluations for p in plans),
        probes=probes,
        probed=probed,
        truths=("reference", "numerical") if reference is not None else ("numerical",),
        pattern_source="; ".join(dict.fromkeys(p.source for p in plans)),
        partial=partial,
    )
    return JacobianVerdict(finding is None and not coverage.empty, finding or "", coverage, tuple(entries), probe_list)


def _entries(names, inputs, truth, found: dict[str, list[np.ndarray]], skip: np.ndarray) -> list[InputEntries]:
    """Entries per input; those of outputs that are not finite are NaN in every source (left out)."""
    result = []
    for i, (name, x, (r, c, v)) in enumerate(zip(names, inputs, truth)):
        undefined = np.isin(r, skip)
        values = {"numerical": v, **{source: found_values[i] for source, found_values in found.items()}}
        result.append(InputEntries(name, tuple(x.shape), r, c, {s: np.where(undefined, np.nan, a) for s, a in values.items()}))
    return result


def _truths(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: values[name] for name in TRUTHS if name in values}


def _entries_pass(entries: Sequence[InputEntries], tolerances: Tolerances) -> bool:
    return all(not (compare_entries(e.values["analytic"], _truths(e.values), tolerances)[0] > 0).any() for e in entries)


def _worst_entry(entries: Sequence[InputEntries], output_shape, tolerances: Tolerances) -> str | None:
    worst = None
    for e in entries:
        excess, _, against = compare_entries(e.values["analytic"], _truths(e.values), tolerances)
        if excess.size and excess.max() > 0:
            k = int(np.argmax(excess))
            if worst is None or excess[k] > worst[0]:
                worst = (excess[k], e, k, against)
    if worst is None:
        return None
    _, e, k, against = worst
    where = f"∂out[{_index(int(e.rows[k]), output_shape)}] / ∂{e.name}[{_index(int(e.cols[k]), e.shape)}]"
    return (f"the Jacobian entry {where} is {_value(e.values['analytic'][k])} by the formula's backward, "
            f"{e.values[against][k]:.6g} by the {against} truth (allowed {tolerances_text(tolerances, against)})")


def _value(a: float) -> str:
    return f"{a:.6g}" if np.isfinite(a) else f"not finite ({a})"


def _worst_probe(probes: Sequence[Probe], names, inputs, tolerances: Tolerances) -> str | None:
    worst = None
    for number, probe in enumerate(probes, 1):
        for i, name in enumerate(names):
            analytic = probe.products["analytic"][i]
            excess, _, against = compare_entries(analytic, _truths({s: v[i] for s, v in probe.products.items()}), tolerances)
            if excess.size and excess.max() > 0:
                k = int(np.argmax(excess))
                if worst is None or excess[k] > worst[0]:
                    worst = (excess[k], number, name, tuple(inputs[i].shape), k, analytic[k], probe.products[against][i][k], against)
    if worst is None:
        return None
    _, number, name, shape, k, a, b, against = worst
    return (f"for random upstream gradient {number}, uᵀJ at {name}[{_index(k, shape)}] is {_value(a)} by the formula's "
            f"backward, {b:.6g} by the {against} truth: the backward uses grad_output wrongly, or misses entries "
            f"(allowed {tolerances_text(tolerances, against)})")


def tolerances_text(tolerances: Tolerances, against: str) -> str:
    return f"{tolerances.atol:g} + {tolerances.rtol:g}·|{against}|"


def _excluded(entries: Sequence[InputEntries], output_shape, tolerances: Tolerances) -> tuple[int, tuple[str, ...]]:
    count, where = 0, []
    for e in entries:
        _, left_out, _ = compare_entries(e.values["analytic"], _truths(e.values), tolerances)
        count += int(left_out.sum())
        for k in np.nonzero(left_out)[0][: max(0, 3 - len(where))]:
            where.append(f"∂out[{_index(int(e.rows[k]), output_shape)}] / ∂{e.name}[{_index(int(e.cols[k]), e.shape)}]")
    return count, tuple(where)

