"""The whole-Jacobian verdict: every entry of a formula's Jacobian against the truth, at the cost
of a few evaluations, and a sentence that says what was covered.

One vector-Jacobian product (the loss's gradient) cannot see a backward that ignores, reduces or
mixes ``grad_output``. So the check compares the Jacobian itself:

- **entries on the pattern**, one by one. The truth's pattern (the reference's structure, verified
  at the point by ``lib.engine.planning``) tells which outputs share no input element; such outputs go
  in one backward call (the rows are coloured, as the columns are for finite differences). For
  cosine, all 64 outputs of a 64×128 pair share one call.
- **every entry, by random probes**: for two or more seeded random upstream vectors u, the
  formula's own backward uᵀJ (plain calls, nothing compressed) against uᵀJ of the truth. They
  catch entries outside the pattern and bugs that only mix outputs.

The truth is finite differences of the formula's forward and, where the family has one, autograd
through the reference, for each input whose reference Jacobian reproduces those differences along
random directions (one that does not is not a truth there, and the coverage names it). A declared
surrogate (the *intended* gradient: a straight-through estimator, a gradient reversal) is the only
truth: finite differences of forward are not held against it. Entries where no truth is finite are
left out, counted and named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from .evaluate import (
    DEFAULT_BUDGET_BYTES,
    MAX_SECOND_LOOK,
    ElementLook,
    compressed_entries,
    entry_noise,
    forward_graph,
    gradient_from_entries,
    in_order,
    look_at_elements,
    numerical_entries,
    one_sided_gaps,
    product_noise,
    directional_gap,
    reproduces,
    vector_jacobian_products,
    with_values,
)
from .finding import NOISE_FACTOR, TRUTH_WORDS, Evidence, Finding
from .planning import DifferencePlan, row_colors
from .signature import name_element
from .tolerances import Tolerances
from ..errors import FormulaError

Tensor = torch.Tensor
PROBES = 2
TRUTHS = ("reference", "numerical")
ROLES = ("reference", "surrogate")  # what the reference is to the verdict: a truth beside finite differences, or the only one
NONE = np.zeros(0, dtype=np.int64)  # no elements
# a reference whose J·d misses the differences along random directions d by more than this part of
# their size is the gradient of another function, not a truth; closer, it is one (the differences
# carry rounding in float32, and miss at a kink)
FOREIGN_GAP = 0.1
COARSE = 100  # an input whose elements are typically within this many steps of 0 is too small for the step to judge its reference


# ---- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputEntries:
    """One input's Jacobian entries that were compared one by one, per source."""

    name: str
    shape: tuple[int, ...]
    rows: np.ndarray  # output element of each entry (flat index)
    cols: np.ndarray  # input element of each entry (flat index)
    values: dict[str, np.ndarray]  # source -> value of each entry
    noise: np.ndarray | None = None  # the numerical entries' own error estimate (rounding), where they are a truth

    @property
    def noises(self) -> dict[str, np.ndarray] | None:
        return {"numerical": self.noise} if self.noise is not None else None


@dataclass(frozen=True)
class Probe:
    """uᵀJ for one random upstream vector u, per source and input (flat)."""

    upstream: np.ndarray
    products: dict[str, tuple[np.ndarray | None, ...]]  # None: an input the source is no truth for (never the analytic)

    def analytic(self, index: int) -> np.ndarray:
        """The formula's own product for input ``index``: there for every input."""
        product = self.products["analytic"][index]
        assert product is not None
        return product


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
    kinks: tuple[str, ...] = ()  # elements where the function has a kink: judged against their one-sided slopes
    role: str = "reference"  # what the reference is: "reference", or "surrogate" (the declared intended gradient)
    unreproduced: tuple[str, ...] = ()  # inputs whose reference Jacobian did not reproduce finite differences: not a truth there
    sampled: tuple[int, ...] = ()  # at scale (``at_scale``): per input, the elements whose gradient was judged under every probe; () whole

    def judged_by_reference(self, name: str) -> bool:
        """Whether input ``name`` was judged by the reference (or the declared surrogate)."""
        return "reference" in self.truths and name not in self.unreproduced

    @property
    def empty(self) -> bool:
        """Nothing was compared where there was something to compare: no verdict can be given. A
        Jacobian with no entries at all (an empty input or output) is judged whole, vacuously, as
        gradcheck judges it."""
        return self.compared == 0 and self.probed == 0 and self.entries > 0

    def _describe_sampled(self) -> str:
        """At scale: what the samples covered, in numbers."""
        elements = sum(self.sampled)
        whose = "every input element's gradient" if "reference" in self.truths else f"{elements:,} sampled input elements' gradients"
        rows = f", {self.compared:,} Jacobian entries of sampled output rows one by one" if self.compared else ""
        text = (f"{whose} under {self.probes} upstream gradients, the drawn one and {self.probes - 1} random ({self.probed:,} values){rows}, "
                "and every element together "
                f"along a random direction, of {self.entries:,} entries in all (sampled at scale: the whole Jacobian is not read)")
        against = " and ".join(TRUTH_WORDS[self.role if t == "reference" else t] for t in self.truths)
        text += f", against {against}"
        if self.unreproduced:
            text += (f"; autograd through the reference is not a truth for {' and '.join(self.unreproduced)}: it did not reproduce "
                     "finite differences of the formula's forward along random directions at this point")
        return text

    def describe(self) -> str:
        rest = self.entries - self.structural
        how = f"by {self.backward_calls:,} backward call{'s' * (self.backward_calls != 1)} and {self.forward_evaluations:,} forward evaluations"
        ones = (f"the {self.structural:,} structurally nonzero ones" if not self.excluded else
                f"{self.compared:,} of the {self.structural:,} structurally nonzero ones")
        if self.entries == 0:
            return "the Jacobian has no entries (an input or the output is empty): nothing to compare, so nothing is wrong"
        if self.sampled:
            return self._describe_sampled()
        if self.structural == 0 and not self.partial:  # the truth is zero everywhere: nothing to compare one by one
            text = f"all {self.entries:,} Jacobian entries, every one zero in the truth, by {self.probes} random probes"
        elif self.partial:
            text = (f"{self.entries:,} Jacobian entries by {self.probes} random probes only; "
                    f"the {self.structural:,} structurally nonzero ones were not compared one by one: {self.partial}")
        elif rest:
            text = f"all {self.entries:,} Jacobian entries: {ones} one by one, {how}, the other {rest:,} by {self.probes} random probes"
        else:
            text = f"all {self.entries:,} Jacobian entries: {ones} one by one, {how}, and all by {self.probes} random probes"
        against = " and ".join(TRUTH_WORDS[self.role if t == "reference" else t] for t in self.truths)
        if self.role == "surrogate":
            against += ", the intended gradient, not the derivative of forward"
        elif "numerical" not in self.truths:
            against += " (its Jacobian reproduced finite differences along random directions at this point)"
        text += f", against {against}"
        if self.unreproduced:
            text += (f"; autograd through the reference is not a truth for {' and '.join(self.unreproduced)}: it did not reproduce "
                     "finite differences of the formula's forward along random directions at this point (a kink there, or a reference "
                     "whose gradient is not its forward's derivative: declare an intended gradient as surrogate=)")
        if self.kinks:
            shown = ", ".join(self.kinks[:3]) + ("…" if len(self.kinks) > 3 else "")
            text += (f"; {len(self.kinks):,} element{'s' * (len(self.kinks) != 1)} not differentiable here (a kink: {shown}), "
                     "judged against the interval between their one-sided derivatives")
        if self.excluded:
            where = ", ".join(self.excluded_where) + ("…" if self.excluded > len(self.excluded_where) else "")
            text += f"; {self.excluded:,} left out because the truth is not finite there ({where})"
        return text


@dataclass(frozen=True)
class OffPattern:
    """An entry of the formula's Jacobian where the true Jacobian is zero (outside its pattern),
    found from a random probe by halving the outputs it is summed over."""

    input: str
    shape: tuple[int, ...]
    row: int  # output element (flat)
    col: int  # input element (flat)
    value: float  # the formula's entry there


@dataclass(frozen=True)
class JacobianVerdict:
    passed: bool
    found: Finding | None  # the worst entry or probe out of tolerance, as facts; None when it passed
    coverage: Coverage
    entries: tuple[InputEntries, ...]
    probes: tuple[Probe, ...]
    zero: tuple[np.ndarray, ...] = ()  # the formula's backward for a zero upstream, per input (flat)
    output_shape: tuple[int, ...] = ()
    second_looked: tuple[np.ndarray, ...] = ()  # per input, elements passed on a second look (kinks, the differences' noise)
    kinks: tuple[np.ndarray, ...] = ()  # per input, flat indices of the elements where the function has a kink
    scales: tuple[float | None, ...] = ()  # per input, the unit of atol: the largest |true entry| of its Jacobian
    linear: bool = True  # the formula's backward is linear in grad_output (tested where the probes show more than the entries)
    off_pattern: OffPattern | None = None  # an entry where the true Jacobian is zero, where the probes found one
    follows_foreign: tuple[str, ...] = ()  # inputs where the backward agrees with a reference that is not a truth there

    @property
    def outcome(self) -> str:
        return "no verdict" if self.coverage.empty else "pass" if self.passed else "fail"

    @property
    def finding(self) -> str:
        """The finding in words; "" when it passed."""
        return self.found.describe() if self.found is not None else ""

    @property
    def summary(self) -> str:
        covered = self.coverage.describe()
        if self.coverage.empty:
            return f"no verdict: the truth is not finite anywhere, so nothing could be compared ({covered})"
        return f"passes: {covered}" if self.passed else f"fails: {self.finding} (checked {covered})"


# ---- comparing values against the truth -------------------------------------------------------------


def coarse(x: Tensor, step: float) -> bool:
    """Whether finite differences at ``step`` are too coarse to judge a reference on ``x``: its
    elements are typically within COARSE steps of 0 (rows of norm 1e-6 differenced by 1e-6), so the
    differences straddle the function's own scale and cannot tell a right reference from a wrong one."""
    finite = x.detach()[torch.isfinite(x.detach())].double()
    return bool(finite.numel()) and float(finite.pow(2).mean().sqrt()) < COARSE * step


def truth_scale(truths: dict[str, np.ndarray]) -> float:
    """The size of the values compared: the largest finite |value| of the reference (of every
    truth without one); 1 when all are 0. atol is taken in this unit, so a gradient that is small
    all over (rows of norm 1e3 give a cosine gradient of 1e-3) is not passed by atol alone."""
    values = [truths["reference"]] if "reference" in truths else list(truths.values())
    largest = max((_largest_finite(np.abs(v)) for v in values), default=0.0)
    return largest if largest > 0 else 1.0


def resolution_unit(output: Tensor, inputs: Sequence[Tensor]) -> float:
    """The least Jacobian entry the dtype can resolve: its eps times the output's largest |value| per
    unit of the inputs' largest. Entries below it are the output's own rounding (a softmax row one-hot
    at norm 1e3 has a Jacobian of 1e-30 made of terms of size 1), so atol's unit is never smaller."""
    largest_input = max((_largest(x) for x in inputs), default=0.0)
    largest_output = _largest(output)
    if largest_input <= 0 or largest_output <= 0:
        return 0.0
    return torch.finfo(output.dtype).eps * largest_output / largest_input if output.is_floating_point() else 0.0


def _largest_finite(magnitudes: np.ndarray) -> float:
    """The largest finite value of an array of |values| (0 when there is none)."""
    largest = float(magnitudes.max(initial=0.0))
    if math.isfinite(largest):  # NaN and inf would show in the maximum: all are finite
        return largest
    return float(magnitudes[np.isfinite(magnitudes)].max(initial=0.0))


def _finite_or_zero(magnitudes: np.ndarray) -> np.ndarray:
    """|values| with NaN and inf as 0 (``np.nan_to_num(a, nan=0, posinf=0)`` for a >= 0)."""
    finite = np.isfinite(magnitudes)
    return magnitudes if finite.all() else np.where(finite, magnitudes, 0.0)


@dataclass(frozen=True)
class Judgement:
    """The tolerance rule's answer for a set of values, entry by entry."""

    excess: np.ndarray  # how far beyond its tolerance each entry is: > 0 fails; +inf an analytic value that is not finite
    left_out: np.ndarray  # entries with no finite truth to judge by (or not finite where PyTorch agrees)
    against: str | None  # the truth the worst failing entry is worst against; None: every entry passes

    @property
    def failed(self) -> bool:
        return self.against is not None


def compare_entries(analytic: np.ndarray, truths: dict[str, np.ndarray], tolerances: Tolerances,
                    noise: dict[str, np.ndarray] | None = None, scale: float | None = None) -> Judgement:
    """The tolerance rule, per entry (see ``Judgement``).

    An entry is left out where no truth is finite, or where the analytic value and the reference
    are both non-finite (the formula agrees with PyTorch there). Elsewhere it fails against every
    finite truth it differs from by more than atol·scale + rtol·|truth| (scale: given, or ``truth_scale``;
    a product uᵀJ is given its Jacobian's, since the product itself may be 0 up to rounding)
    and, for a truth with an error estimate in ``noise`` (the finite differences' rounding),
    NOISE_FACTOR times that estimate; and wherever it is not finite itself. ``excess`` > 0 marks
    a failure; +inf an analytic value that is not finite. Where the reference is a truth and the
    entry agrees with it, the finite differences do not judge it: an exact reference is never
    outvoted by differences that disagree with both (their step is wrong for the element's scale)."""
    quick = _all_finite_judgement(analytic, truths, tolerances, noise, scale)
    if quick is not None:
        return quick
    a = analytic
    finite_a = np.isfinite(a)
    all_finite_a = bool(finite_a.all())  # the common case: no masks to apply for the analytic values
    reference = truths.get("reference")
    agrees_with_pytorch = (~finite_a & ~np.isfinite(reference) if reference is not None and not all_finite_a
                           else np.zeros(a.shape, dtype=bool))
    any_truth = None
    excess = None
    worst_gap, against = -np.inf, None
    atol = tolerances.atol * max(truth_scale(truths) if scale is None else scale, tolerances.unit)
    for name, truth in truths.items():
        finite_truth = np.isfinite(truth)
        any_truth = finite_truth if any_truth is None else any_truth | finite_truth
        with np.errstate(invalid="ignore"):  # in place where it can be: at millions of values each pass counts
            difference = np.asarray(np.subtract(a, truth))
            np.abs(difference, out=difference)
            bound = np.abs(truth).astype(float, copy=False)  # a truth of integers (zeros) gets float bounds
            bound *= tolerances.rtol
            bound += atol
            gap = difference - bound
            if noise is not None and name in noise:
                gap = np.minimum(gap, difference - NOISE_FACTOR * noise[name])  # within the differences' own error
        gap = np.asarray(gap, dtype=float)  # an array even for a 0-d input (arithmetic gives a scalar there), not a copy
        if not all_finite_a:
            gap[~finite_a] = np.inf
            gap[~finite_truth | agrees_with_pytorch] = -np.inf
        elif not finite_truth.all():
            gap[~finite_truth] = -np.inf
        if name == "numerical" and reference is not None:
            # a formula that agrees with the reference is not outvoted by the differences alone: they
            # disagree with both, so they are the ones off (a step too large for the element's scale)
            with np.errstate(invalid="ignore"):
                agrees = np.abs(a - reference) <= atol + tolerances.rtol * np.abs(reference)
            gap = np.where(agrees, -np.inf, gap)
        excess = gap if excess is None else np.maximum(excess, gap, out=excess)
        largest = gap.max(initial=-np.inf)
        if largest > 0 and largest > worst_gap:  # the truth that the worst entry is worst against
            worst_gap, against = largest, name
    if excess is None or any_truth is None:  # no truth at all
        return Judgement(np.full(a.shape, -np.inf), np.ones(a.shape, dtype=bool), None)
    left_out = ~any_truth | agrees_with_pytorch
    return Judgement(excess, left_out, against)


def _all_finite_judgement(a: np.ndarray, truths: dict[str, np.ndarray], tolerances: Tolerances, noise: dict[str, np.ndarray] | None,
                          scale: float | None) -> Judgement | None:
    """``compare_entries`` where every value is finite, the common case, without a mask over
    millions of values: None where any is not (NaN and inf show in the gaps' maximum), or where
    the differences and the reference both judge (the rule's slower part)."""
    if noise is not None or not a.size or ("numerical" in truths and "reference" in truths):
        return None
    atol = tolerances.atol * max(truth_scale(truths) if scale is None else scale, tolerances.unit)
    excess, worst_gap, against = None, -np.inf, None
    for name, truth in truths.items():
        with np.errstate(invalid="ignore", over="ignore"):
            gap = np.asarray(np.subtract(a, truth), dtype=float)
            np.abs(gap, out=gap)
            bound = np.abs(truth).astype(float, copy=False)
            bound *= tolerances.rtol
            bound += atol
            np.subtract(gap, bound, out=gap)
        largest = float(gap.max())
        if not math.isfinite(largest):
            return None
        if largest > 0 and largest > worst_gap:
            worst_gap, against = largest, name
        excess = gap if excess is None else np.maximum(excess, gap, out=excess)
    if excess is None:
        return None
    return Judgement(excess, np.zeros(a.shape, dtype=bool), against)


# ---- the verdict ---------------------------------------------------------------------------------


def check_jacobian(
    function: Callable[..., Tensor],
    reference: Callable[..., Tensor] | None,
    inputs: Sequence[Tensor],
    names: Sequence[str],
    plans: Sequence[DifferencePlan],
    tolerances: Tolerances,
    *,
    probes: int = PROBES,
    seed: int = 0,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    work_limit: float = math.inf,
    output_element: Callable[[int], str] | None = None,
    role: str = "reference",
    looks: int = MAX_SECOND_LOOK,
    read_kinks: bool = True,
) -> JacobianVerdict:
    """The formula's whole Jacobian against the truth (see the module's docstring).

    The truths for the entries: the reference's Jacobian on the pattern, where it reproduced
    plain differences along random directions at the point (``plans`` carry it), and the
    numerical Jacobian wherever a plan has it already or nothing else can stand in for it (no
    reference, or one that did not reproduce the differences). With ``role="surrogate"`` the
    reference is the only truth.

    The formula's backward calls (the entries, the probes, the zero upstream) run on one forward
    call's graph, which is let go before the second look."""
    skip = plans[0].skip_rows if plans else np.zeros(0, dtype=np.int64)
    sizes = [x.numel() for x in inputs]
    plans = [p if p.reference_values is not None and p.values is None else with_values(function, inputs, p, budget_bytes) for p in plans]
    numerical = [numerical_entries(function, inputs, p, None, budget_bytes) if p.values is not None else None for p in plans]
    noises = [None if t is None else entry_noise(p, x, *t) for p, x, t in zip(plans, inputs, numerical)]
    graph = forward_graph(function, inputs)
    shape, m = tuple(graph[1].shape), graph[1].numel()
    output_element = output_element or (lambda flat: name_element("out", shape, flat))
    patterns = [_pattern(p, t) for p, t in zip(plans, numerical)]
    colors = row_colors(patterns, sizes, m)
    groups = int(colors.max()) + 1 if colors.size else 0
    partial = f"{groups:,} backward calls would exceed the work limit" if groups * sum(sizes) > work_limit else ""

    differences = role != "surrogate"  # finite differences of forward are a truth, unless the intended gradient is declared
    truths: list[dict[str, np.ndarray]] = [{} if t is None or not differences else {"numerical": t[2]} for t in numerical]
    trusted = [reference is not None] * len(inputs)  # per input: the reference is a truth there
    foreign: dict[int, np.ndarray] = {}  # per input where it is not: the reference's entries
    marked: dict[int, dict[int, ElementLook]] | None = None  # the kinks, found once where they are needed
    if reference is not None and not partial:
        kept = [p.reference_values for p in plans if p.structured and p.reference_values is not None]
        if len(kept) < len(plans):  # a plan without the reference's entries
            kept = compressed_entries(reference, inputs, patterns, colors, skip, shape, budget_bytes)
        for i, (truth, values, plan, (rows, cols)) in enumerate(zip(truths, kept, plans, patterns)):
            trusted[i] = (not differences or plan.reference_values is not None or coarse(inputs[i], tolerances.step)
                          or reproduces(plan, rows, cols, values) or directional_gap(plan, rows, cols, values) <= FOREIGN_GAP)
            differenced = numerical[i]
            if not trusted[i] and differenced is not None:  # far off along random directions: kinks can do that too
                marked = marked if marked is not None else _marked_kinks(function, inputs, plans, plans, tolerances, budget_bytes)
                trusted[i] = not _mostly_wrong(values, differenced, noises[i], np.array(sorted(marked.get(i, {})), dtype=np.int64), tolerances)
            if trusted[i]:
                truth["reference"] = values
            else:
                foreign[i] = values
    entries: list[InputEntries] = []
    judged: list = []
    kinks: list[str] = []
    kink_elements: list[np.ndarray] = [NONE] * len(inputs)
    forgiven: dict = {"noise": {}, "looks": {}}  # per input, elements judged on a second look, and the kinked ones' looks
    kink_looks: dict[int, dict[int, ElementLook]] = {}  # per input, the kinked elements' one-sided slopes: where the truth is a set
    scales: Sequence[float | None]  # per input, the truths' scale (None: each judgement's own)
    if not partial:
        analytic = _backward(compressed_entries, function, inputs, patterns, colors, skip, shape, budget_bytes, graph=graph)
        entries = _entries(names, inputs, patterns, truths, analytic, skip, noises)
        scales = floored([truth_scale(_truths(e.values)) for e in entries], graph[1], inputs)  # the truths' own: the same for both passes
        judged = [compare_entries(e.values["analytic"], _truths(e.values), tolerances, e.noises, scale) for e, scale in zip(entries, scales)]
        if any(j.failed for j in judged):  # a failure must hold with plain calls, not only under vmap
            analytic = _backward(compressed_entries, function, inputs, patterns, colors, skip, shape, budget_bytes, batched=False, graph=graph)
            entries = _entries(names, inputs, patterns, truths, analytic, skip, noises)
            judged = [compare_entries(e.values["analytic"], _truths(e.values), tolerances, e.noises, scale) for e, scale in zip(entries, scales)]

    generator = torch.Generator().manual_seed(seed + 7919)
    upstreams = torch.randn((probes, *shape), generator=generator, dtype=torch.float64)
    upstreams.reshape(probes, -1)[:, torch.from_numpy(skip)] = 0.0
    flat_u = upstreams.reshape(probes, -1).numpy()
    products: dict[str, list] = {"analytic": _backward(vector_jacobian_products, function, inputs, upstreams, batched=False, graph=graph)}
    zero = [p[0].numpy() for p in _backward(vector_jacobian_products, function, inputs, torch.zeros((1, *shape), dtype=torch.float64),
                                            batched=False, graph=graph)]
    del graph  # every backward call of the formula is made
    follows_foreign = tuple(names[i] for i, values in foreign.items() if _agrees(entries[i].values["analytic"], values, tolerances))
    if not partial and differences:  # kinks and the differences' noise matter only where they are a truth
        judged, forgiven = _second_look(function, inputs, entries, judged, tolerances, [p.batched for p in plans], budget_bytes, looks)
        # kinks are read from one-sided differences at float64's rounding: not of a function computed in float32 (a kernel's)
        marked = marked if marked is not None else _marked_kinks(function, inputs, entries, plans, tolerances, budget_bytes) if read_kinks else {}
        kink_looks = {i: {**marked.get(i, {}), **forgiven["looks"].get(i, {})} for i in range(len(inputs))}
        kink_elements = [np.array(sorted(kink_looks[i]), dtype=np.int64) for i in range(len(inputs))]
        kinks = [name_element(e.name, e.shape, int(c)) for e, elements in zip(entries, kink_elements) for c in elements]
    if any(trusted):
        by_reference = vector_jacobian_products(reference, inputs, upstreams, batched=False)
        products["reference"] = [p if ok else None for p, ok in zip(by_reference, trusted)]
    if differences and any(t is not None for t in numerical):
        products["numerical"] = [None if t is None else torch.from_numpy(np.stack([gradient_from_entries(*t, u, skip, n) for u in flat_u]))
                                 for t, n in zip(numerical, sizes)]
    probe_list = tuple(
        Probe(flat_u[k], {source: tuple(None if p is None else
                                        _at_kinks(_forgive(p[k].numpy(), forgiven["noise"].get(i) if source == "numerical" else None),
                                                  products["analytic"][i][k].numpy(), flat_u[k], kink_looks.get(i))
                                        if source != "analytic" else p[k].numpy()
                                        for i, p in enumerate(per_input)) for source, per_input in products.items()})
        for k in range(probes)
    )

    def probe_noise(k: int, i: int) -> dict[str, np.ndarray] | None:
        differenced = numerical[i]
        return None if differenced is None else {"numerical": product_noise(plans[i], inputs[i], differenced, flat_u[k])}

    if not entries:
        scales = [None] * len(inputs)
    probes_judged = [[compare_entries(p.analytic(i), _probe_truths(p, i), tolerances, probe_noise(k, i), scales[i])
                      for i in range(len(inputs))] for k, p in enumerate(probe_list)]
    finding = (worst_entry(entries, judged, output_element, tolerances, role, scales)
               or not_zero(zero, names, inputs, patterns, skip, scales, tolerances))
    linear, located = True, None
    outside = None if finding else _off_pattern(entries, probe_list, tolerances, scales, kink_elements)
    if outside is not None:  # more than the entries account for: not linear, or entries where the truth has none
        linear = _backward(_linear, function, inputs, upstreams, tolerances)
        located = _backward(_locate, function, inputs, entries, probe_list, *outside[:2], shape) if linear else None
        finding = _off_pattern_finding(outside, linear, located, output_element, role, probe_list, tolerances)
    finding = finding or worst_probe(probe_list, probes_judged, names, inputs, tolerances, scales, role)
    structural = sum(r.size for r, _ in patterns)
    excluded, where = _excluded(entries, judged, output_element)
    probed = sum(int((~j.left_out).sum()) for per_probe in probes_judged for j in per_probe)
    coverage = Coverage(
        entries=m * sum(sizes),
        structural=structural,
        compared=0 if partial else structural - excluded,
        excluded=excluded,
        excluded_where=where,
        backward_calls=0 if partial else groups,
        forward_evaluations=sum(2 * len(p.directions) + (2 * p.n_groups if p.values is not None else 0) for p in plans),
        probes=probes,
        probed=probed,
        kinks=tuple(kinks),
        truths=tuple(t for t in TRUTHS if t in products),
        pattern_source="; ".join(dict.fromkeys(p.source for p in plans)),
        partial=partial,
        role=role,
        unreproduced=tuple(name for name, ok in zip(names, trusted) if reference is not None and not ok),
    )
    return JacobianVerdict(finding is None and not coverage.empty, finding, coverage, tuple(entries), probe_list,
                           tuple(zero), shape, tuple(forgiven["noise"].get(i, NONE) for i in range(len(inputs))), tuple(kink_elements),
                           tuple(scales), linear, located, follows_foreign)


SCALE_FLOOR = 1e-8  # an input's unit of atol is at least this share of the largest input's: rounding, not a gradient, below it


def floored(scales: list[float], output: Tensor, inputs: Sequence[Tensor]) -> list[float]:
    """Each input's unit of atol (its truth's largest |value|), floored where that Jacobian is
    rounding: at ``SCALE_FLOOR`` of the largest input's (attention weights that underflow to 1e-17),
    and at √eps·max|f| / max|x|, the size a gradient's rounding takes (the cosine of parallel
    inputs, whose true gradient is 0, computed as 1e-17). rtol still holds each entry to its own size."""
    finite = [s for s in scales if np.isfinite(s)]
    floor = SCALE_FLOOR * max(finite, default=0.0)
    f = _largest(output)
    found = []
    for s, x in zip(scales, inputs):
        size = _largest(x)
        own = math.sqrt(torch.finfo(x.dtype).eps) * f / size if size > 0 and x.is_floating_point() else 0.0
        found.append(max(s, floor, own) if np.isfinite(s) else s)
    return found


def _largest(t: Tensor) -> float:
    """The largest finite |value| of ``t`` (0 where there is none)."""
    if not t.numel():
        return 0.0
    t = t.detach()
    if t.is_floating_point() and not t.is_complex():  # one pass, nothing allocated: at millions of values it counts
        low, high = torch.aminmax(t)
        largest = max(-float(low), float(high))
    else:
        largest = float((t if t.is_complex() else t.double()).abs().max())
    if math.isfinite(largest):  # every value finite, the common case: no mask over millions
        return largest
    finite = t[torch.isfinite(t)] if t.is_floating_point() else t.double()
    return float(finite.abs().max()) if finite.numel() else 0.0


def _entries(names, inputs, patterns, truths: list[dict[str, np.ndarray]], analytic: list[np.ndarray], skip: np.ndarray,
             noises: Sequence[np.ndarray | None]) -> list[InputEntries]:
    """Entries per input; those of outputs that are not finite are NaN in every source (left out)."""
    result = []
    for name, x, (r, c), truth, a, noise in zip(names, inputs, patterns, truths, analytic, noises):
        values = {"analytic": a, **truth}
        if skip.size:
            undefined = np.isin(r, skip)
            values = {s: np.where(undefined, np.nan, v) for s, v in values.items()}
        result.append(InputEntries(name, tuple(x.shape), r, c, values, noise if "numerical" in values else None))
    return result


def not_zero(gradients: Sequence[np.ndarray], names, inputs, patterns, skip: np.ndarray, scales: Sequence[float | None] = (),
              tolerances: Tolerances | None = None) -> Finding | None:
    """A backward must give exactly 0 for a zero upstream gradient, as gradcheck requires: an
    added term, or a gradient not multiplied by grad_output, shows here even when it is small.
    Elements that feed an output that is not finite are left out (0·NaN is NaN)."""
    for i, (name, x, gradient, (rows, cols)) in enumerate(zip(names, inputs, gradients, patterns)):
        wrong = gradient != 0
        if skip.size:
            undefined = np.zeros(gradient.size, dtype=bool)
            undefined[cols[np.isin(rows, skip)]] = True
            wrong &= ~undefined
        if wrong.any():
            k = int(np.argmax(np.where(wrong, np.nan_to_num(np.abs(gradient), nan=np.inf), -1.0)))
            own = scales[i] if i < len(scales) else None
            scale = own if own is not None else 1.0
            evidence = Evidence.of_product(name, tuple(x.shape), gradient, np.zeros(gradient.size), wrong, scale)
            return Finding("zero upstream", name, tuple(x.shape), k, float(gradient[k]), 0.0, upstream=np.zeros(0), tolerances=tolerances,
                           scale=scale, evidence=(evidence,))
    return None


def _off_pattern(entries: Sequence[InputEntries], probes: Sequence[Probe], tolerances: Tolerances,
                 scales: Sequence[float | None], kinks: Sequence[np.ndarray] = ()) -> tuple | None:
    """What the formula's backward puts outside the pattern, for each random upstream u: uᵀJ by a
    plain call minus the part that the entries already checked account for. The truth is 0
    there, so this is held to atol, as gradcheck holds an entry whose truth is 0; rtol² of the
    pattern's own part allows for rounding (a backward computed in float32, say). At a kink the
    pattern is one side's (the reference's choice): those elements are the probes' to judge,
    against the set of one-sided derivatives."""
    worst = None
    for number, probe in enumerate(probes, 1):
        for i, e in enumerate(entries):
            upstream = probe.upstream[e.rows]
            terms = upstream * e.values["analytic"]
            n = probe.analytic(i).size
            ordered = in_order(e.cols, n)  # one entry per element, in order: the sums per element are the terms
            on_pattern = terms if ordered else np.bincount(e.cols, weights=terms, minlength=n)
            scale = np.abs(terms) if ordered else np.bincount(e.cols, weights=np.abs(terms), minlength=n)
            truths = _probe_truths(probe, i)
            atol = tolerances.atol * max(own if (own := scales[i]) is not None else truth_scale(truths or {"analytic": probe.analytic(i)}),
                                         tolerances.unit)
            with np.errstate(invalid="ignore"):
                outside = np.abs(probe.analytic(i) - on_pattern)
                excess = outside - (atol + tolerances.rtol**2 * scale)
                finite = np.isfinite(on_pattern)
                if not finite.all():
                    excess[~finite] = -np.inf
                if i < len(kinks) and kinks[i].size:
                    excess[kinks[i]] = -np.inf
                if truths:  # what the truth itself has outside the pattern (entries too small to see where it was found)
                    name = next(iter(truths))
                    truth_terms = upstream * e.values[name]
                    truth_outside = np.abs(truths[name] - (truth_terms if ordered else np.bincount(e.cols, weights=truth_terms, minlength=n)))
                    excess -= _finite_or_zero(truth_outside)
            if excess.size and excess.max() > 0:
                k = int(np.argmax(excess))
                if worst is None or excess[k] > worst[0]:
                    truth = next(iter(truths.values())) if truths else on_pattern  # where no truth is finite: the entries' part
                    worst = (excess[k], number, i, e.name, e.shape, k, outside[k], atol, excess > 0, truth,
                             scales[i] if scales[i] is not None else 1.0)
    return None if worst is None else worst[1:]


def _mostly_wrong(values: np.ndarray, numerical: tuple, noise: np.ndarray | None, kinks: np.ndarray, tolerances: Tolerances) -> bool:
    """Whether the reference's entries miss the finite differences on most of the pattern away
    from the function's kinks: the gradient of another function (a straight-through identity, a
    reversed sign), not a truth with a few odd entries (a kink's one-sided choice, rounding)."""
    cols, truth = numerical[1], numerical[2]
    away = ~np.isin(cols, kinks) & np.isfinite(truth) & np.isfinite(values)
    if not away.any():
        return False
    wrong = compare_entries(values[away], {"numerical": truth[away]}, tolerances,
                            {"numerical": noise[away]} if noise is not None else None).excess > 0
    return bool(wrong.mean() > 0.5)


def _backward(call, *args, **kwargs):
    """``call`` of the formula's backward: what it raises is the formula's own (a FormulaError),
    never Gradient Lab's. Here backward is called many times on one graph, as ``retain_graph=True``
    users do: a backward that edits what it saved in place raises on the second call."""
    try:
        return call(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - the code under test's
        raise FormulaError("The formula's backward", error) from error


def _agrees(analytic: np.ndarray, values: np.ndarray, tolerances: Tolerances) -> bool:
    """Whether the formula's entries are the reference's, where they are finite."""
    finite = np.isfinite(analytic)
    return bool(finite.any()) and not compare_entries(analytic[finite], {"reference": values[finite]}, tolerances).failed


def _linear(function, inputs, upstreams: Tensor, tolerances: Tolerances) -> bool:
    """Whether the formula's backward is linear in grad_output, as a vector-Jacobian product is:
    b(u₁ + u₂) = b(u₁) + b(u₂) and b(2u₁) = 2·b(u₁), for the probes' u₁, u₂."""
    u1, u2 = upstreams[0], upstreams[-1]
    b = vector_jacobian_products(function, inputs, torch.stack([u1, u2, u1 + u2, 2 * u1]), batched=False)
    for products in b:
        g = products.numpy()
        scale = max(float(np.abs(g[np.isfinite(g)]).max(initial=0.0)), 1.0)
        for lhs, rhs in ((g[2], g[0] + g[1]), (g[3], 2 * g[0])):
            finite = np.isfinite(lhs) & np.isfinite(rhs)
            if np.any(np.abs(lhs - rhs)[finite] > tolerances.atol * scale + tolerances.rtol * np.abs(rhs)[finite]):
                return False
    return True


def _locate(function, inputs, entries: Sequence[InputEntries], probes: Sequence[Probe], number: int, index: int,
            shape: tuple[int, ...]) -> OffPattern | None:
    """The output whose entry for the probe's worst input element is outside the pattern: a
    linear backward's excess over the entries splits over the outputs, so halving the outputs
    the probe's upstream covers, and keeping the half with more, finds one in log₂(outputs) calls."""
    probe, e = probes[number - 1], entries[index]
    analytic = probe.analytic(index)
    k = int(np.argmax(np.abs(analytic - _on_pattern(e, probe.upstream, analytic.size))))
    mine = e.cols == k  # the entries of that element

    def excess(rows: np.ndarray) -> float:
        u = np.zeros_like(probe.upstream)
        u[rows] = probe.upstream[rows]
        got = vector_jacobian_products(function, inputs, torch.from_numpy(u).reshape(1, *shape), batched=False)[index][0, k]
        return float(got) - float(e.values["analytic"][mine] @ u[e.rows[mine]])

    rows = np.flatnonzero(probe.upstream)
    total = excess(rows)
    while rows.size > 1:
        half = rows[: rows.size // 2]
        first = excess(half)
        rows, total = (half, first) if abs(first) >= abs(total - first) else (rows[rows.size // 2:], total - first)
    if not rows.size or np.any(mine & (e.rows == rows[0])):  # on the pattern: its own entry differs alone and in company
        return None
    return OffPattern(e.name, e.shape, int(rows[0]), k, total / float(probe.upstream[rows[0]]))


def _on_pattern(e: InputEntries, upstream: np.ndarray, n: int) -> np.ndarray:
    """uᵀA from the entries alone, per input element."""
    return np.bincount(e.cols, weights=np.nan_to_num(upstream.reshape(-1)[e.rows] * e.values["analytic"]), minlength=n)


def _off_pattern_finding(outside: tuple, linear: bool, located: OffPattern | None, output_element: Callable[[int], str],
                         role: str, probes: Sequence[Probe], tolerances: Tolerances) -> Finding:
    number, i, name, shape, k, amount, atol, wrong, truth, scale = outside
    formula = probes[number - 1].products["analytic"][i]
    evidence = (Evidence.of_product(name, shape, formula, truth, wrong, scale),)
    common = dict(role=role, probe=number, upstream=probes[number - 1].upstream, tolerances=tolerances, scale=scale, amount=float(amount),
                  allowed=float(atol), evidence=evidence)
    if not linear:
        return Finding("not linear", name, shape, k, float(formula[k]), float(truth[k]), **common)
    if located is not None:
        return Finding("off pattern", located.input, located.shape, located.col, float(located.value), 0.0,
                       output=output_element(located.row), **common)
    return Finding("off pattern", name, shape, k, float(formula[k]), float(truth[k]), **common)


def _forgive(product: np.ndarray, elements: np.ndarray | None) -> np.ndarray:
    """A numerical uᵀJ with the forgiven elements left out (NaN): there its central differences
    are not the truth (a kink) or not precise enough to judge by (their own error)."""
    if elements is None or not elements.size:
        return product
    product = product.copy()
    product[elements] = np.nan
    return product


def _marked_kinks(function, inputs, entries, plans, tolerances, budget_bytes) -> dict[int, dict[int, ElementLook]]:
    """Every element where the function has a kink, whether or not the formula's entry fails
    there: where the finite differences were taken, the entries whose one-sided slopes part by
    more than the verdict's tolerance and their own rounding, confirmed element by element (the
    gap must stay as h doubles). Per input, the kinked elements' looks by flat index."""
    found = {}
    for i, (_entry, plan) in enumerate(zip(entries, plans)):
        if plan.values is None:
            continue
        gaps, rounding = one_sided_gaps(function, inputs, plan, budget_bytes)
        cols = plan.cols if plan.structured else _all_columns(plan)  # a dense plan's entries: every (row, col)
        suspect = (gaps > tolerances.atol * truth_scale({"numerical": plan.values}) + tolerances.rtol * np.abs(plan.values)) & (gaps > 16 * rounding)
        elements = np.unique(cols[suspect])
        if not elements.size or elements.size > MAX_SECOND_LOOK:
            continue
        looks = look_at_elements(function, inputs, i, elements.tolist(), tolerances.step, plan.batched, budget_bytes)
        fine = _looks_at_own_scale(function, inputs, i, np.array([c for c in elements if looks[int(c)].kink.any()]), tolerances.step)
        looks.update(fine)  # where the plain step sees a kink, the element's own scale says whether there is one
        found[i] = {int(c): looks[int(c)] for c in elements if looks[int(c)].kink.any()}
    return found


def _at_kinks(product: np.ndarray, formula: np.ndarray, upstream: np.ndarray, looks: dict[int, ElementLook] | None) -> np.ndarray:
    """A truth's uᵀJ where the function has a kink: the truth there is a set, the derivatives of
    uᵀf along the element that a valid gradient may take (``ElementLook.bounds``: the one-sided
    ones and those at tie-broken points nearby; the reference's choice is one member), so the
    truth is the member nearest the formula's value."""
    if not looks:
        return product
    product = product.copy()
    for c, look in looks.items():
        if not np.isfinite(product[c]):  # left out (the differences' own noise there): not judged by a set either
            continue
        low, high = look.bounds(upstream)
        member = min(max(formula[c], float(low)), float(high))
        if np.isfinite(member) and not abs(formula[c] - product[c]) <= abs(formula[c] - member):  # the truth's own value is a member too
            product[c] = member
    return product


def _all_columns(plan: DifferencePlan) -> np.ndarray:
    return np.tile(np.arange(plan.n_inputs), plan.n_outputs)


def _second_look(function, inputs, entries, judged, tolerances, batched: Sequence[bool], budget_bytes: int,
                 most: int = MAX_SECOND_LOOK):
    """Failing entries looked at again, element by element (up to ``most`` elements per input): at
    a kink (one-sided slopes that disagree and stay apart as h halves) the formula's entry passes
    if it lies between them, whatever the reference chose there (ties in max have many right answers);
    elsewhere an entry that fails only against the finite differences fails only if it also misses
    the central difference by several times that difference's own error (Richardson's truncation
    estimate and the dtype's rounding). Returns the judgements and,
    per input, the elements passed on this look ("noise": the differences' noise, kinks, and
    elements judged at their own scale) and the kinked elements' looks ("looks": the set a valid
    gradient lies in)."""
    forgiven: dict = {"noise": {}, "looks": {}}
    new_judged = []
    for i, (e, judgement) in enumerate(zip(entries, judged)):
        excess, left_out, against = judgement.excess, judgement.left_out, judgement.against
        if "numerical" not in e.values or against is None:
            new_judged.append(judgement)
            continue
        only_numerical = excess > 0
        if "reference" in e.values:
            ref_excess = compare_entries(e.values["analytic"], {"reference": e.values["reference"]}, tolerances).excess
            only_numerical &= ~(ref_excess > 0)
        failing = np.flatnonzero(excess > 0)
        elements = np.unique(e.cols[failing])
        if elements.size > most:
            new_judged.append(judgement)
            continue
        looks = look_at_elements(function, inputs, i, elements.tolist(), tolerances.step, batched[i], budget_bytes)
        # the sharper look can change a judgement only where the plain one sees a kink or the entry fails against
        # the differences alone: an entry a trusted reference fails at a smooth point fails whatever the step
        unsure = {int(e.cols[k]) for k in failing if only_numerical[k] or looks[int(e.cols[k])].kink[int(e.rows[k])]}
        fine = _looks_at_own_scale(function, inputs, i, np.array(sorted(unsure), dtype=np.int64), tolerances.step)
        scale = max(truth_scale(_truths(e.values)), tolerances.unit)
        excess = excess.copy()
        noisy: set[int] = set()
        kinked = forgiven["looks"][i] = {}
        for k in failing:
            r, a = int(e.rows[k]), e.values["analytic"][k]
            look = _sharper(looks[int(e.cols[k])], fine.get(int(e.cols[k])), r)
            allowed = tolerances.atol * scale + tolerances.rtol * abs(look.central[r])
            if look.kink[r]:
                low, high = (float(bound[r]) for bound in look.bounds())
                if low - allowed <= a <= high + allowed:
                    excess[k] = -np.inf
                    kinked[int(e.cols[k])] = look
            elif only_numerical[k] and abs(a - look.central[r]) <= allowed + 4 * (look.truncation[r] + look.rounding[r]):
                excess[k] = -np.inf
                noisy.add(int(e.cols[k]))
            elif only_numerical[k] and look is not looks[int(e.cols[k])]:  # judged at the element's own scale: that is the truth shown
                excess[k] = abs(a - look.central[r]) - allowed - 4 * (look.truncation[r] + look.rounding[r])
                e.values["numerical"] = e.values["numerical"].copy()
                e.values["numerical"][k] = look.central[r]
                noisy.add(int(e.cols[k]))  # the probes leave it to its entries, judged here
        forgiven["noise"][i] = np.array(sorted(noisy | set(kinked)), dtype=np.int64)
        still = excess.max(initial=-np.inf) > 0
        new_judged.append(Judgement(excess, left_out, against if still else None))
    return new_judged, forgiven


def _looks_at_own_scale(function, inputs, index: int, elements: np.ndarray, step: float) -> dict[int, ElementLook]:
    """Each element smaller than 1 in magnitude (and not 0) looked at again with a step scaled to
    it, h·|x|: a row of norm 1e-8 differenced at its own scale, where h alone would step across
    the function's whole structure there (and make a smooth point look like a kink)."""
    flat = inputs[index].detach().double().cpu().reshape(-1).numpy()
    found = {}
    for c in elements.tolist():
        magnitude = abs(float(flat[c]))
        if 0 < magnitude < 1:
            found[c] = look_at_elements(function, inputs, index, [c], step * magnitude)[c]
    return found


def _sharper(base: ElementLook, fine: ElementLook | None, row: int) -> ElementLook:
    """The look whose differences are the more precise at ``row``: the one at the element's own
    scale where the plain step sees a kink (the nearer look tells whether there is one, and its
    one-sided slopes are the kink's own), or where its own error (Richardson's truncation and the
    rounding) is smaller."""
    if fine is None:
        return base
    if base.kink[row]:
        return fine
    error = lambda look: look.truncation[row] + look.rounding[row]  # noqa: E731
    return fine if error(fine) < error(base) else base


def _pattern(plan: DifferencePlan, entries: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    """The Jacobian's pattern (rows, cols) for an input: its plan's where coloured, else its numerical entries'."""
    if plan.structured:
        return plan.pattern
    assert entries is not None  # not coloured: every element differenced, so its entries were computed
    return entries[0], entries[1]


def _probe_truths(probe: Probe, index: int) -> dict[str, np.ndarray]:
    return {name: product for name in TRUTHS if name in probe.products and (product := probe.products[name][index]) is not None}


def _truths(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: values[name] for name in TRUTHS if name in values}


def _entry_name(e: InputEntries, k: int, output_element: Callable[[int], str]) -> str:
    return f"∂{output_element(int(e.rows[k]))} / ∂{name_element(e.name, e.shape, int(e.cols[k]))}"


def worst_entry(entries: Sequence[InputEntries], judged, output_element: Callable[[int], str], tolerances: Tolerances,
                 role: str = "reference", scales: Sequence[float | None] = ()) -> Finding | None:
    worst = None
    for index, judgement in enumerate(judged):
        if judgement.failed:
            k = int(np.argmax(judgement.excess))
            if worst is None or judgement.excess[k] > worst[0]:
                worst = (judgement.excess[k], index, k, judgement.against)
    if worst is None:
        return None
    _, index, k, against = worst
    e = entries[index]
    evidence = tuple(_entries_evidence(entry, judgement, against, scale) for entry, judgement, scale
                     in zip(entries, judged, scales or [None] * len(entries)))
    own = scales[index] if index < len(scales) else None
    scale = own if own is not None else truth_scale(_truths(e.values))
    return Finding("entry", e.name, e.shape, int(e.cols[k]), float(e.values["analytic"][k]), float(e.values[against][k]), against, role,
                   output=output_element(int(e.rows[k])), tolerances=tolerances, scale=scale, evidence=evidence)


def _entries_evidence(e: InputEntries, judgement: Judgement, against: str, scale: float | None) -> Evidence:
    """One input's entries as the verdict compared them, against the truth that judged it (the
    reference where it was one)."""
    truths = _truths(e.values)
    source = judgement.against or (against if against in truths else next(iter(truths), "analytic"))
    truth = e.values.get(source, e.values["analytic"])
    return Evidence(e.name, e.shape, e.cols, e.values["analytic"], truth, judgement.excess > 0,
                    scale if scale is not None else truth_scale(truths))


def worst_probe(probes: Sequence[Probe], judged, names, inputs, tolerances: Tolerances, scales: Sequence[float | None],
                 role: str = "reference") -> Finding | None:
    worst = None
    for number, (probe, per_input) in enumerate(zip(probes, judged), 1):
        for i, judgement in enumerate(per_input):
            excess, against = judgement.excess, judgement.against
            if against is not None:
                k = int(np.argmax(excess))
                if worst is None or excess[k] > worst[0]:
                    worst = (excess[k], number, i, k, against,
                             own if (own := scales[i]) is not None else truth_scale(_probe_truths(probe, i)))
    if worst is None:
        return None
    _, number, i, k, against, scale = worst
    probe = probes[number - 1]
    evidence = []
    for j, (name, judgement) in enumerate(zip(names, judged[number - 1])):
        truths = _probe_truths(probe, j)
        source = judgement.against or (against if against in truths else next(iter(truths), None))
        if source is not None:
            evidence.append(Evidence.of_product(name, tuple(inputs[j].shape), probe.analytic(j), truths[source],
                                                judgement.excess > 0, own if (own := scales[j]) is not None else truth_scale(truths)))
    return Finding("probe", names[i], tuple(inputs[i].shape), k, float(probe.analytic(i)[k]),
                   float(_probe_truths(probe, i)[against][k]), against, role, probe=number, upstream=probe.upstream, tolerances=tolerances,
                   scale=scale, evidence=tuple(evidence))


def _excluded(entries: Sequence[InputEntries], judged, output_element: Callable[[int], str]) -> tuple[int, tuple[str, ...]]:
    count, where = 0, list[str]()
    for e, judgement in zip(entries, judged):
        left_out = judgement.left_out
        count += int(left_out.sum())
        for k in np.nonzero(left_out)[0][: max(0, 3 - len(where))]:
            where.append(_entry_name(e, k, output_element))
    return count, tuple(where)

