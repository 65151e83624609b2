"""Judge, at scale: where reading the whole Jacobian is not affordable, a stated verdict from
samples whose cost grows with the elements, as gradcheck's fast mode does.

- Every input element's gradient under the drawn upstream (the one the maps draw: its gradients
  are computed here once) and ``UPSTREAMS`` random upstream vectors u, uᵀJ by the
  formula's backward against the truth's, element by element: autograd through the reference,
  which must first reproduce finite differences along random directions d (uᵀ·f'(x)d against
  (uᵀJ)·d, as gradcheck's fast mode checks the formula). A local bug (one element 1 % off, one row
  reading another's upstream, a transposed weight gradient) shows in its own elements, where fast
  gradcheck's one scalar dilutes it.
- ``ROWS`` output elements' Jacobian rows, entry by entry (a one-hot upstream each).
- Without a reference (or one that does not reproduce the differences): each of ``COLUMNS``
  sampled input elements per input differenced alone (its column of J), which gives the truth of
  every uᵀJ at that element; and every element together along the random directions.
- A zero upstream must give exactly 0.

What was covered is said in numbers (``Coverage.sampled``). Memory is a few copies of the inputs and
outputs per upstream, never a Jacobian. At millions of elements every pass over memory and every
fresh allocation counts (gradcheck's fast mode makes about ten): each backward is handed its own
upstream, products are kept as the backward returned them, and comparisons take the all-finite
path without masks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from ..errors import FormulaError
from .evaluate import forward_graph, vector_jacobian_products
from .finding import Finding
from .judge import (FOREIGN_GAP, NONE, Coverage, InputEntries, JacobianVerdict, Probe, compare_entries, floored, not_zero, worst_entry,
                    worst_probe)
from .planning import DifferencePlan
from .signature import name_element
from .tolerances import Tolerances

Tensor = torch.Tensor

SCALE_ELEMENTS = 2**16  # input elements in all from which a verdict samples instead of reading the whole Jacobian
SCALE_ENTRIES = 2**28  # or Jacobian entries in all (outputs × input elements): a dense pattern would be read row by row
UPSTREAMS = 2  # random upstream vectors, every element's gradient compared under each (as the whole-Jacobian verdict's probes)
ROWS = 2  # output elements whose Jacobian rows are compared entry by entry (a backward call each)
COLUMNS = 32  # without a reference: input elements per input differenced alone


def at_scale(inputs: Sequence[Tensor], outputs: int) -> bool:
    """Whether the verdict samples: the inputs hold ``SCALE_ELEMENTS`` or more elements in all, or
    the Jacobian more than ``SCALE_ENTRIES`` entries (a row-wise softmax of 128×256: where every
    element feeds many outputs, the pattern is read one output row at a time)."""
    elements = sum(x.numel() for x in inputs)
    return elements >= SCALE_ELEMENTS or elements * outputs > SCALE_ENTRIES


def sampled_bytes(sizes: Sequence[int], outputs: int, itemsize: int = 8) -> int:
    """What a sampled verdict holds at its peak, about: per upstream and sampled row, the upstream and
    both sides' products (the formula's and the truth's, float64), the maps' gradients and errors, and
    the inputs moved along their directions."""
    elements = sum(sizes)
    per_vector = 8 * (outputs + 2 * elements)
    return (UPSTREAMS + 2 * ROWS + 2) * per_vector + 16 * 8 * elements + 4 * itemsize * (elements + outputs)


def sampled_plans(inputs: Sequence[Tensor], n_outputs: int) -> list[DifferencePlan]:
    """The plans a sampled verdict stands on: no pattern read, nothing differenced by groups."""
    return [DifferencePlan(i, x.numel(), n_outputs, None, None, None, "sampled at scale (no pattern read)", sampled=True)
            for i, x in enumerate(inputs)]


class DrawnRaised(Exception):
    """The formula's backward raised for the drawn upstream, its first backward call: a failure of
    its backward as such (``__cause__``), not of a later call on the graph."""


@dataclass(frozen=True)
class Sampled:
    """The sampled verdict, and the drawn upstream's products it was judged with (per input, in the
    input's shape): the formula's, and the reference's where there is one (else None)."""

    verdict: JacobianVerdict
    analytic: list[np.ndarray]
    referenced: list[np.ndarray] | None


def check_at_scale(function: Callable[..., Tensor], reference: Callable[..., Tensor] | None, inputs: Sequence[Tensor],
                   names: Sequence[str], tolerances: Tolerances, drawn: Tensor, *, seed: int = 0,
                   output_element: Callable[[int], str] | None = None, role: str = "reference") -> Sampled:
    """The sampled verdict (see the module's docstring). The drawn upstream (the one the maps draw)
    is the first probe, beside ``UPSTREAMS`` random ones: its products are computed once."""
    graph = forward_graph(function, inputs)
    y = graph[1]
    shape, m = tuple(y.shape), y.numel()
    output_element = output_element or (lambda flat: name_element("out", shape, flat))
    generator = torch.Generator().manual_seed(seed + 7919)
    rows = _sample(m, ROWS, generator)
    probes_count = 1 + UPSTREAMS
    upstreams = torch.empty((probes_count, m), dtype=torch.float64)  # the drawn one first
    upstreams[0] = drawn.detach().to(dtype=torch.float64, device="cpu").reshape(-1)
    upstreams[1:] = torch.randn((UPSTREAMS, m), generator=generator, dtype=torch.float32)  # four times faster than float64
    upstreams = upstreams.reshape(probes_count, *shape)
    # the vectors each backward is given: the probes, the sampled rows' one-hot upstreams, the zero upstream
    vectors = _Vectors(upstreams, rows.tolist())
    truths: list[dict[str, list[np.ndarray] | np.ndarray]] = [{} for _ in inputs]  # per input, per source: each probe's
    theirs, referenced = None, None
    if reference is not None:  # every product of the reference on one forward call's graph
        theirs = _products(forward_graph(reference, inputs), vectors, zero=False)
        referenced = [p[0].numpy().reshape(tuple(x.shape)) for p, x in zip(theirs, inputs)]
    try:
        products = _products(graph, vectors, zero=True)
    except Exception as error:  # noqa: BLE001 - the formula's backward's own: raised for the drawn upstream alone, its failure as such
        raised = FormulaError("The formula's backward", error)
        _raises_for_the_first(function, inputs, upstreams[:1].clone(), raised)
        raise raised from error
    del graph
    analytic = [p[:probes_count] for p in products]
    analytic_rows = [p[probes_count:-1] for p in products]
    zero = [p[-1].numpy() for p in products]
    directions = [torch.randn(x.shape, generator=generator, dtype=torch.float32).to(x) for x in inputs]
    along = _along(function, inputs, directions, tolerances.step)  # f'(x)·d, every element moved together
    trusted, reference_rows = False, None
    if theirs is not None:
        by_reference = [p[:probes_count] for p in theirs]
        trusted = role == "surrogate" or _reproduces(by_reference, directions, along, upstreams)
        if trusted:
            reference_rows = [p[probes_count:] for p in theirs]
            for i in range(len(inputs)):
                truths[i]["reference"] = [p.numpy() for p in by_reference[i]]
    sampled: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(inputs)
    columns: list[np.ndarray] = [np.zeros((m, 0))] * len(inputs)
    if not trusted and role != "surrogate":  # columns differenced alone: the truth at those elements
        sampled, columns = _columns(function, inputs, tolerances.step, seed)
        for i, (elements, block) in enumerate(zip(sampled, columns)):
            numerical = np.full((probes_count, inputs[i].numel()), np.nan)
            numerical[:, elements] = upstreams.reshape(probes_count, -1).numpy() @ block
            truths[i]["numerical"] = numerical
    entries = _row_entries(names, inputs, rows.numpy(), analytic_rows, reference_rows)
    scales = floored([_entry_scale(e, block) for e, block in zip(entries, columns)], y, inputs)
    judged = [compare_entries(e.values["analytic"], {k: v for k, v in e.values.items() if k != "analytic"}, tolerances, scale=s)
              for e, s in zip(entries, scales)]
    flat_u = upstreams.reshape(probes_count, -1).numpy()
    probes = tuple(Probe(flat_u[k], {"analytic": tuple(analytic[i][k].numpy() for i in range(len(inputs))),
                                     **{source: tuple(truths[i][source][k] for i in range(len(inputs)))
                                        for source in ("reference", "numerical") if all(source in t for t in truths)}})
                   for k in range(probes_count))
    probes_judged = [[compare_entries(p.analytic(i), {s: v for s in p.products if s != "analytic" and (v := p.products[s][i]) is not None},
                                      tolerances, scale=scales[i]) for i in range(len(inputs))] for p in probes]
    finding = (worst_entry(entries, judged, output_element, tolerances, role, scales)
               or not_zero(zero, names, inputs, [(NONE, NONE)] * len(inputs), NONE, scales, tolerances)
               or worst_probe(probes, probes_judged, names, inputs, tolerances, scales, role)
               or _directional(analytic, directions, along, upstreams, names, inputs, tolerances))
    compared = sum(int((~j.left_out).sum()) for j in judged)
    probed = sum(int((~j.left_out).sum()) for per_probe in probes_judged for j in per_probe)
    truth_names = ("reference",) if trusted else ("numerical",)
    coverage = Coverage(
        entries=m * sum(x.numel() for x in inputs), structural=compared, compared=compared, excluded=0, excluded_where=(),
        backward_calls=probes_count + rows.numel() + 1, forward_evaluations=2 * len(inputs) + 2 * sum(e.size for e in sampled),
        probes=probes_count, probed=probed, pattern_source="sampled at scale", truths=truth_names, role=role,
        unreproduced=tuple(names) if reference is not None and not trusted else (),
        sampled=tuple(int(e.size) for e in sampled) if not trusted else tuple(x.numel() for x in inputs),
    )
    verdict = JacobianVerdict(finding is None and not coverage.empty, finding, coverage, tuple(entries), probes, tuple(zero), shape,
                              scales=tuple(scales))
    return Sampled(verdict, [a[0].numpy().reshape(tuple(x.shape)) for a, x in zip(analytic, inputs)], referenced)


class _Vectors:
    """The upstreams a sampled verdict hands each backward, one at a time, each a fresh copy (a
    backward may write into its grad_output): the probes, then a one-hot upstream per sampled
    row, then (``zero``) the zero upstream. The one-hot and zero ones are made in one buffer
    reset between calls: at millions of elements a fresh allocation per call costs more than the
    call."""

    def __init__(self, probes: Tensor, rows: list[int]) -> None:
        self.probes, self.rows = probes, rows

    def each(self, zero: bool, dtype: torch.dtype, device: torch.device):
        for u in self.probes:
            yield u.to(dtype=dtype, device=device, copy=True)
        buffer = torch.zeros(self.probes.shape[1:], dtype=dtype, device=device)
        flat = buffer.view(-1)
        for row in self.rows:
            flat[row] = 1
            yield buffer
            flat.zero_()  # also whatever the backward wrote into it
        if zero:
            yield buffer


def _products(graph: tuple[list[Tensor], Tensor], vectors: _Vectors, zero: bool) -> list[list[Tensor]]:
    """Per input, per vector (``_Vectors``), uᵀJ by a backward on ``graph`` (flat, float64, on the
    CPU): plain calls, no copies beyond the gradients themselves, except of a gradient that is its
    upstream itself (x + 1's), whose buffer the next call resets."""
    xs, y = graph
    found: list[list[Tensor]] = [[] for _ in xs]
    with torch.enable_grad():
        for u in vectors.each(zero, y.dtype, y.device):
            grads = torch.autograd.grad(y, xs, u, retain_graph=True, allow_unused=True)
            given = u.untyped_storage().data_ptr()
            for products, g, x in zip(found, grads, xs):
                if g is None:
                    products.append(torch.zeros(x.numel(), dtype=torch.float64))
                    continue
                g = g.detach().reshape(-1).to(dtype=torch.float64, device="cpu").resolve_conj().resolve_neg()
                products.append(g.clone() if g.untyped_storage().data_ptr() == given else g)
    return found


def _raises_for_the_first(function, inputs: Sequence[Tensor], first: Tensor, error: FormulaError) -> None:
    """Raise ``DrawnRaised`` where the formula's backward raises for the first vector alone, on a
    forward call of its own (not a later call on a shared graph)."""
    try:
        vector_jacobian_products(function, inputs, first, batched=False)
    except Exception:  # noqa: BLE001 - the code under test's
        raise DrawnRaised() from error


def _along(function, inputs: Sequence[Tensor], directions: Sequence[Tensor], step: float) -> list[np.ndarray]:
    """(f(x + h·d) − f(x − h·d)) / 2h for each input's random direction d (the others held): the
    formula's forward differenced along it, flat."""
    found = []
    with torch.no_grad():
        for i, d in enumerate(directions):
            plus, minus = function(*_moved(inputs, i, step * d)), function(*_moved(inputs, i, -step * d))
            found.append(((plus - minus) / (2 * step)).detach().double().cpu().reshape(-1).numpy())
    return found


def _sample(n: int, count: int, generator: torch.Generator) -> Tensor:
    """Up to ``count`` distinct indices below ``n``, ascending, drawn without a permutation of all n."""
    if n <= 4 * count:
        return torch.randperm(n, generator=generator)[:count].sort().values
    return torch.randint(n, (2 * count,), generator=generator).unique()[:count]  # unique sorts


def _moved(inputs: Sequence[Tensor], index: int, shift: Tensor) -> list[Tensor]:
    return [x + shift if j == index else x for j, x in enumerate(inputs)]


def _projections(products, directions, along, upstreams: Tensor):
    """Per input, (uᵀJ)·d from the products (one per upstream) and uᵀ(f'(x)d) from the differences,
    for every upstream u."""
    flat_u = upstreams.reshape(upstreams.shape[0], -1).numpy()
    for product, d, moved in zip(products, directions, along):
        flat_d = d.detach().double().cpu().reshape(-1).numpy()
        yield np.array([row.numpy() @ flat_d for row in product]), flat_u @ moved


def _reproduces(products: Sequence[Sequence[Tensor]], directions, along, upstreams: Tensor) -> bool:
    """Whether the reference's uᵀJ reproduce the differences along each direction: (uᵀJ)·d against
    uᵀ(f'(x)d), within ``FOREIGN_GAP`` of their size (else it is the gradient of another function)."""
    for mine, theirs in _projections(products, directions, along, upstreams):
        size = max(float(np.abs(theirs).max(initial=0.0)), float(np.abs(mine).max(initial=0.0)))
        if not np.all(np.isfinite(mine)) or not np.all(np.isfinite(theirs)):
            return False
        if size > 0 and float(np.abs(mine - theirs).max()) > FOREIGN_GAP * size:
            return False
    return True


def _columns(function, inputs: Sequence[Tensor], step: float, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per input, ``COLUMNS`` sampled elements and their columns of J by central differences,
    (outputs, sampled) each."""
    generator = torch.Generator().manual_seed(seed + 104729)
    elements, columns = [], []
    with torch.no_grad():
        for i, x in enumerate(inputs):
            chosen = _sample(x.numel(), COLUMNS, generator)
            block = []
            for c in chosen.tolist():
                e = torch.zeros(x.numel(), dtype=x.dtype, device=x.device)
                e[c] = step
                e = e.reshape(x.shape)
                block.append(((function(*_moved(inputs, i, e)) - function(*_moved(inputs, i, -e))) / (2 * step)).double().cpu().reshape(-1).numpy())
            elements.append(chosen.numpy().astype(np.int64))
            columns.append(np.stack(block, axis=1) if block else np.zeros((0, 0)))
    return elements, columns


def _row_entries(names, inputs, rows: np.ndarray, analytic: Sequence[Sequence[Tensor]],
                 reference: Sequence[Sequence[Tensor]] | None) -> list[InputEntries]:
    """The sampled rows' entries per input where either side is not 0, with the reference's beside
    the formula's where it is a truth."""
    found = []
    for i, (name, x) in enumerate(zip(names, inputs)):
        if reference is None:  # no truth for a row without a reference: none compared
            empty = np.zeros(0, dtype=np.int64)
            found.append(InputEntries(name, tuple(x.shape), empty, empty, {"analytic": np.zeros(0), "numerical": np.zeros(0)}))
            continue
        r, c, mine, theirs = [], [], [], []
        for row, mine_row, theirs_row in zip(rows, analytic[i], reference[i]):  # one sampled row at a time: no (rows, elements) copy
            a, b = mine_row.numpy(), theirs_row.numpy()
            nonzero = np.flatnonzero((a != 0) | (b != 0))
            r.append(np.full(nonzero.size, row, dtype=np.int64))
            c.append(nonzero)
            mine.append(a[nonzero])
            theirs.append(b[nonzero])
        found.append(InputEntries(name, tuple(x.shape), np.concatenate(r or [np.zeros(0, np.int64)]),
                                  np.concatenate(c or [np.zeros(0, np.int64)]).astype(np.int64),
                                  {"analytic": np.concatenate(mine or [np.zeros(0)]), "reference": np.concatenate(theirs or [np.zeros(0)])}))
    return found


def _entry_scale(entries: InputEntries, columns: np.ndarray) -> float:
    """The unit of atol for one input: the largest |true entry| seen, of the sampled rows by the
    reference or of the sampled columns by differences (1 where all are 0)."""
    seen = [entries.values["reference"]] if "reference" in entries.values else []
    seen.append(columns.reshape(-1))
    largest = max((float(np.nan_to_num(np.abs(v), nan=0.0, posinf=0.0).max(initial=0.0)) for v in seen), default=0.0)
    return largest if largest > 0 else 1.0


def _directional(analytic: Sequence[Sequence[Tensor]], directions, along, upstreams: Tensor, names, inputs, tolerances: Tolerances) -> Finding | None:
    """Every element together, as gradcheck's fast mode: (uᵀJ)·d by the formula against uᵀ(f'(x)d)
    by differences, per input; a finding where they differ beyond the tolerance (scaled to their size)."""
    flat_u = upstreams.reshape(upstreams.shape[0], -1).numpy()
    for name, x, (mine, theirs) in zip(names, inputs, _projections(analytic, directions, along, upstreams)):
        size = float(np.abs(theirs).max(initial=0.0)) or 1.0
        gap = np.abs(mine - theirs)
        allowed = tolerances.atol * size + tolerances.rtol * np.abs(theirs) + math.sqrt(tolerances.step) * size
        if not np.all(np.isfinite(mine)) or bool((gap > allowed).any()):
            k = int(np.argmax(np.where(np.isfinite(gap), gap - allowed, np.inf)))
            return Finding("probe", name, tuple(x.shape), 0, float(mine[k]), float(theirs[k]), "numerical", probe=k + 1,
                           upstream=flat_u[k], tolerances=tolerances, scale=size)
    return None
