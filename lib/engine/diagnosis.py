"""Why a backward is wrong: hypotheses tested against the whole-Jacobian comparison.

Each hypothesis is a simple story about the analytic Jacobian A and the true one T (on the
pattern's entries, and in the random probes' products uᵀA, uᵀT): a flipped sign (A = −T), a
constant factor (A = cT), a factor per output row (A_r = c_r T_r, with what c_r follows), the
upstream gradient ignored, reduced or permuted, a transposed Jacobian, two inputs' gradients
swapped, a term of rank one per row missing, wrong only in a region of the inputs, not finite
where the truth is. A hypothesis *explains* the error when the residual it leaves is within the
verdict's own tolerance; every one that does is reported, with its evidence in numbers.
Plain numpy data in, plain data out; nothing here names a family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from .judge import JacobianVerdict, compare_entries
from .signature import name_element
from .tolerances import Tolerances


@dataclass(frozen=True)
class Finding:
    kind: str  # "sign", "factor", "row factor", "grad_output ignored", ...
    words: str  # the diagnosis, in plain words
    evidence: str  # the numbers behind it
    headline: str = ""  # the words cut to a few, for a verdict's headline ("" where ``words`` are short already)
    # where a story is about some elements of one input: (its index, which of its elements it
    # predicts wrong from the input's flat values), for ``confirm`` to test at a second point
    predicts: tuple[int, Callable[[np.ndarray], np.ndarray]] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Diagnosis:
    findings: tuple[Finding, ...]

    @property
    def words(self) -> str:
        """Every finding's words, joined: what a verdict line says."""
        return "; ".join(f.words for f in self.findings)

    @property
    def headline(self) -> str:
        """The findings in a few words each, joined by " · ": what a verdict card leads with."""
        return " · ".join(dict.fromkeys(f.headline or f.words for f in self.findings))


def _truth(values: dict[str, np.ndarray]) -> np.ndarray:
    return values["reference"] if "reference" in values else values["numerical"]


def _explains(a: np.ndarray, t: np.ndarray, tolerances: Tolerances) -> bool:
    """Whether a (the hypothesis applied) is t within the verdict's tolerance, where both are finite."""
    judged = compare_entries(a, {"truth": t}, tolerances)  # the common case first: no masks over millions of values
    if not judged.failed:
        return bool((~judged.left_out).any())
    if math.isfinite(float(judged.excess.max())):  # wrong where both are finite
        return False
    finite = np.isfinite(a) & np.isfinite(t)
    if not finite.any():
        return False
    excess = compare_entries(a[finite], {"truth": t[finite]}, tolerances).excess
    return not (excess > 0).any()


def _stack(verdict: JacobianVerdict) -> tuple[np.ndarray, np.ndarray]:
    """Every compared entry of every input: (analytic, truth), flat."""
    a = np.concatenate([e.values["analytic"] for e in verdict.entries]) if verdict.entries else np.zeros(0)
    t = np.concatenate([_truth(e.values) for e in verdict.entries]) if verdict.entries else np.zeros(0)
    return a, t


def diagnose(verdict: JacobianVerdict, inputs: Sequence[np.ndarray], tolerances: Tolerances,
             second_order_wrong: bool = False, summed: Sequence[tuple[int, tuple[int, ...]]] = ()) -> Diagnosis:
    """Every hypothesis that explains the verdict's failure (none when it passed). ``summed``:
    (input, shape) where the backward returned a gradient of another shape than its input's,
    which PyTorch summed to fit (``evaluate.summed_gradients``): the cause, told first."""
    findings: list[Finding] = []
    if verdict.passed:
        if second_order_wrong:
            findings.append(Finding("double backward", "right to first order, wrong in double backward",
                                    "every Jacobian entry agrees; the Hessian-vector products do not", "wrong in double backward"))
        return Diagnosis(tuple(findings))
    for index, shape in summed:
        e = verdict.entries[index] if index < len(verdict.entries) else None
        name, own = (e.name, tuple(e.shape)) if e is not None else (f"input {index + 1}", tuple(np.shape(inputs[index])))
        findings.append(Finding("summed shape", f"the backward returns a gradient of shape {shape} for {name}, whose shape is {own}: "
                                "PyTorch sums it to fit without a word",
                                f"the Function's backward, called as autograd calls it, returns {shape} for {name} {own}",
                                f"gradient of {name} returned as {shape}, summed by PyTorch"))
    rolled = _rolled(verdict, tolerances) if len(verdict.probes) >= 2 else None
    if rolled is not None:  # it predicts every product the formula gave: told alone, before stories that only say where it is wrong
        return Diagnosis((*findings, rolled))
    a, t = _stack(verdict)
    finite = np.isfinite(a) & np.isfinite(t)
    tests = (_follows_foreign, _not_finite, _sign_or_factor, _input_factor, _row_factor, _row_factor_and_own_term, _transposed, _swapped,
             _reduction_dim, _region)
    for test in tests:
        found = test(verdict, a, t, finite, inputs, tolerances)
        if found:
            findings.append(found)
    findings += _upstream(verdict, tolerances, findings)
    if not findings and verdict.entries:
        rank_one = _rank_one_term(verdict, tolerances)
        if rank_one:
            findings.append(rank_one)
    return Diagnosis(tuple(findings))


def diagnose_failure(failure, inputs: Sequence) -> Diagnosis | None:
    """Why a backward raised, where its exception says it: a broadcasting mismatch on a 3-D input
    is a reduction over the wrong dim (the tutorial's backward reduces over dim -1, its forward over 1)."""
    shapes_mismatch = failure.stage == "backward" and failure.kind == "RuntimeError" and "size of tensor" in failure.message
    if shapes_mismatch and any(x.dim() >= 3 for x in inputs):
        return Diagnosis((Finding("reduction dim", "the backward reduces over the wrong dim: its shapes do not match a 3-D input's",
                                  str(failure), "reduces over the wrong dim"),))
    return None


# ---- the hypotheses ---------------------------------------------------------------------------------


def _follows_foreign(verdict, a, t, finite, inputs, tolerances) -> Finding | None:
    """Right by the reference where the reference is no truth: most likely the user's intended gradient."""
    if not verdict.follows_foreign:
        return None
    return Finding("surrogate", "the backward is the reference's gradient, which is not the derivative of forward: if it is the "
                   "intended gradient (a straight-through estimator, a gradient reversal), declare the reference as surrogate=",
                   f"for {' and '.join(verdict.follows_foreign)} the formula's Jacobian entries equal autograd through the "
                   "reference, whose Jacobian does not reproduce finite differences of the forward along random directions",
                   "follows a reference that is not forward's derivative")


def _not_finite(verdict, a, t, finite, inputs, tolerances) -> Finding | None:
    bad = ~np.isfinite(a) & np.isfinite(t)
    if not bad.any():
        return None
    return Finding("not finite", f"not finite at {int(bad.sum()):,} Jacobian entries where the truth is finite",
                   f"{int(bad.sum()):,} of {a.size:,} compared entries are NaN or Inf in the formula's backward only",
                   "not finite where the truth is")


def _probes_explained(verdict, scale_of_entry, tolerances: Tolerances) -> bool:
    """Whether every probe's uᵀA equals uᵀ(S ⊙ T) for the hypothesis' scaling S of the true
    entries: a story about the entries must hold for every upstream too."""
    for probe in verdict.probes:
        for i, e in enumerate(verdict.entries):
            truth = _truth(e.values)
            predicted = np.bincount(e.cols, weights=np.nan_to_num(probe.upstream[e.rows] * scale_of_entry(i) * truth),
                                    minlength=probe.products["analytic"][i].size)
            if not _explains(probe.products["analytic"][i], predicted, tolerances):
                return False
    return True


def _sign_or_factor(verdict, a, t, finite, inputs, tolerances) -> Finding | None:
    if not finite.any() or not np.any(t[finite]):
        return None
    c = float(a[finite] @ t[finite] / (t[finite] @ t[finite]))
    if not np.isfinite(c) or abs(c - 1) < 1e-6:
        return None
    # a factor is a story only where it holds at every entry more tightly than it departs from 1: a
    # backward wrong at a few entries is not "off by 1.00065" everywhere, within the verdict's rtol
    tight = replace(tolerances, rtol=min(tolerances.rtol, abs(c - 1) / 4), atol=min(tolerances.atol, abs(c - 1) / 4))
    if not _explains(a, c * t, tight):
        return None
    if not _probes_explained(verdict, lambda i: c, tolerances):
        return None
    if abs(c + 1) <= 1e-6:
        return Finding("sign", "sign flipped", "analytic = −1 × truth at every compared entry")
    if c == 0 or not np.any(a[finite]):
        return Finding("no gradient", "no gradient: the backward gives 0 wherever the truth has one",
                       "analytic = 0 at every compared entry", "gives no gradient")
    words = f"sign flipped and off by a constant factor {abs(c):.6g}" if c < 0 else f"off by a constant factor {c:.6g}"
    return Finding("factor", words, f"analytic = {c:.6g} × truth at every compared entry")


def _input_factor(verdict, a, t, finite, inputs, tolerances) -> Finding | None:
    """With several inputs: one input's gradient off by a constant factor, the others right (a
    weight's gradient doubled beside a right one for x). Where every input has the same factor,
    ``_sign_or_factor`` tells it."""
    if len(verdict.entries) < 2:
        return None
    factors = []
    for e in verdict.entries:
        ea, et = e.values["analytic"], _truth(e.values)
        ok = np.isfinite(ea) & np.isfinite(et)
        if not ok.any() or not np.any(et[ok]):
            return None
        c = float(ea[ok] @ et[ok] / (et[ok] @ et[ok]))
        if not np.isfinite(c):
            return None
        c = 1.0 if abs(c - 1) < 1e-6 else c
        tight = replace(tolerances, rtol=min(tolerances.rtol, max(abs(c - 1), 1e-6) / 4), atol=min(tolerances.atol, max(abs(c - 1), 1e-6) / 4))
        if not _explains(ea, c * et, tight if c != 1 else tolerances):
            return None
        factors.append(c)
    wrong = [(e.name, c) for e, c in zip(verdict.entries, factors) if c != 1]
    if not wrong or len(wrong) == len(factors) and np.allclose(factors, factors[0], rtol=1e-6, atol=0):  # none, or all alike: _sign_or_factor's
        return None
    if not _probes_explained(verdict, lambda i: factors[i], tolerances):
        return None
    words = "; ".join(f"the gradient of {name} is off by a constant factor {c:.6g}" for name, c in wrong)
    right = [e.name for e, c in zip(verdict.entries, factors) if c == 1]
    evidence = "; ".join(f"analytic = {c:.6g} × truth at every compared entry of {name}" for name, c in wrong)
    return Finding("factor", words, evidence + (f", and right for {', '.join(right)}" if right else ""))


def _row_factor(verdict, a, t, finite, inputs, tolerances) -> Finding | None:
    """A_r = c_r · T_r for each output row r, the c_r not all equal; what c_r follows."""
    rows = np.concatenate([e.rows for e in verdict.entries]) if verdict.entries else np.zeros(0, dtype=int)
    if rows.size == 0:
        return None
    m = int(rows.max()) + 1
    if np.bincount(rows, minlength=m).max() < 2:
        return None  # one entry per row: any error is "a factor per row", which says nothing
    use = finite
    num = np.bincount(rows[use], weights=a[use] * t[use], minlength=m)
    den = np.bincount(rows[use], weights=t[use] * t[use], minlength=m)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(den > 0, num / den, np.nan)
    fitted = np.where(np.isfinite(c[rows]), c[rows] * t, np.nan)
    known = np.isfinite(c)
    if known.sum() < 2 or not _explains(np.where(np.isfinite(fitted), a, np.nan), fitted, tolerances):
        return None
    if not _probes_explained(verdict, lambda i: np.nan_to_num(c[verdict.entries[i].rows]), tolerances):
        return None
    values = c[known]
    if np.allclose(values, values[0], rtol=1e-6):
        return None  # a constant: the factor hypothesis says it
    sign = " and the sign flipped" if np.all(values < 0) else ""
    follows = _what_it_follows(np.abs(values), known, verdict, inputs)
    words = f"off by a factor that differs from row to row{sign}" + (f": {follows}" if follows else "")
    return Finding("row factor", words, f"per output row, analytic = c_r × truth; c_r from {values.min():.4g} to {values.max():.4g}",
                   " · ".join(filter(None, ["sign flipped" if sign else "", _missing(follows) or "off by a factor per row"])))


def _row_factor_and_own_term(verdict, a, t, finite, inputs, tolerances) -> Finding | None:
    """A_r = c_r · T_r + d_r,i · x_i,r for each output row r: a factor per row, and a term along
    each input's own elements in that row (the tutorial's cosine: its projection term lacks the
    1/‖x1‖² that the normalisation would bring)."""
    entries = verdict.entries
    if not entries or any(not np.all(np.isfinite(e.values["analytic"])) for e in entries):
        return None
    rows = np.concatenate([e.rows for e in entries])
    if rows.size == 0:
        return None
    m = int(rows.max()) + 1
    if np.bincount(rows, minlength=m).min() < len(entries) + 2:
        return None  # too few entries per row to tell a factor and a term apart
    xs = [np.asarray(x, dtype=np.float64).reshape(-1)[e.cols] for e, x in zip(entries, inputs)]
    design = np.zeros((rows.size, 1 + len(entries)))
    design[:, 0] = t
    offset = 0
    for i, (e, x) in enumerate(zip(entries, xs)):
        design[offset : offset + e.rows.size, 1 + i] = x
        offset += e.rows.size
    if not np.all(np.isfinite(design)):
        return None
    coefficients = np.zeros((m, design.shape[1]))
    fitted = np.zeros(rows.size)
    order = np.argsort(rows, kind="stable")  # entries grouped by row: each row's fit is a slice
    bounds = np.searchsorted(rows[order], np.arange(m + 1))
    for r in range(m):
        mine = order[bounds[r] : bounds[r + 1]]
        solution, *_ = np.linalg.lstsq(design[mine], a[mine], rcond=None)
        coefficients[r] = solution
        fitted[mine] = design[mine] @ solution
    if not _explains(a, fitted, tolerances) or _explains(a, t, tolerances):
        return None
    c = coefficients[:, 0]
    if np.allclose(c, 1, rtol=1e-6) or np.allclose(coefficients[:, 1:], 0, atol=tolerances.atol):
        return None
    sign = "sign flipped, and " if np.all(c < 0) else ""
    follows = _what_it_follows(np.abs(c), np.ones(m, dtype=bool), verdict, inputs)
    names = " and ".join(e.name for e in entries)
    words = (f"{sign}off by a factor per row" + (f", {follows}" if follows else "")
             + f"; and an extra term along each input's own row ({names})")
    return Finding("row factor and term", words, f"per output row r, analytic = c_r × truth + d_r × input row; c_r from {c.min():.4g} to {c.max():.4g}",
                   " · ".join(filter(None, ["sign flipped" if sign else "", _missing(follows) or "off by a factor per row",
                                            "extra term along each row"])))


def _missing(follows: str) -> str:
    """"missing 1/(‖x1‖·‖x2‖)" from what a factor per row follows, where it names one."""
    return follows.split(", a ", 1)[1] if ", a missing " in follows else ""


def _what_it_follows(factors: np.ndarray, known: np.ndarray, verdict, inputs) -> str:
    """Whether the per-row factors are a power of the rows' input norms: log c_r against log of
    each candidate, slope and fit."""
    norms = {}
    for e, x in zip(verdict.entries, inputs):
        flat = np.abs(np.asarray(x, dtype=np.float64).reshape(-1))
        squares = np.bincount(e.rows, weights=flat[e.cols] ** 2, minlength=known.size)
        counts = np.bincount(e.rows, minlength=known.size)
        norms[f"‖{e.name}‖"] = np.sqrt(np.where(counts > 0, squares, np.nan))
    candidates = dict(norms)
    if len(norms) == 2:
        (n1, v1), (n2, v2) = norms.items()
        candidates[f"{n1}·{n2}"] = v1 * v2
    log_c = np.log(factors)
    best = None
    for name, values in candidates.items():
        v = values[known]
        ok = np.isfinite(v) & (v > 0) & np.isfinite(log_c)
        if ok.sum() < 2 or np.ptp(np.log(v[ok])) < 1e-6:
            continue
        slope, intercept = np.polyfit(np.log(v[ok]), log_c[ok], 1)
        residual = np.abs(log_c[ok] - (slope * np.log(v[ok]) + intercept)).max()
        if residual < 1e-3 and abs(slope - round(slope)) < 1e-3 and round(slope) != 0:
            power = int(round(slope))
            if best is None or residual < best[0]:
                best = (residual, name, power, float(np.exp(intercept)))
    if best is None:
        return ""
    _, name, power, scale = best
    what = name if power == 1 else f"1/({name})" if power == -1 else f"({name})^{power}"
    scaled = "" if abs(scale - 1) < 1e-3 else f" × {scale:.4g}"
    missing = f", a missing 1/({name})" if power == 1 and not scaled else ""
    return f"{what}{scaled}{missing}"


MAX_ENTRIES_BY_HAND = 200_000  # hypotheses that walk the entries in Python stop above this many


def _transposed(verdict, a, t, finite, inputs, tolerances) -> Finding | None:
    """A(r, c) = T(c, r): for an input whose Jacobian is square (as many outputs as elements), and
    where the transposed truth is not zero on the pattern (a backward that gives 0 there is not
    "transposed")."""
    if a.size > MAX_ENTRIES_BY_HAND:
        return None
    outputs = int(np.prod(verdict.output_shape)) if verdict.output_shape else 1
    for e in verdict.entries:
        size = int(np.prod(e.shape)) if e.shape else 1
        if size != outputs:
            continue
        truth = _truth(e.values)
        lookup = {(int(r), int(c)): v for r, c, v in zip(e.rows, e.cols, truth)}
        if not lookup or max(int(e.rows.max()), int(e.cols.max())) >= size * 4:
            continue
        swapped = np.array([lookup.get((int(c), int(r)), 0.0) for r, c in zip(e.rows, e.cols)])
        if not np.any(swapped[np.isfinite(swapped)] != 0):
            continue
        if not _explains(e.values["analytic"], truth, tolerances) and _explains(e.values["analytic"], swapped, tolerances):
            return Finding("transposed", f"the Jacobian of {e.name} is transposed", f"analytic entry (r, c) = true entry (c, r) for {e.name}",
                           f"{e.name}'s Jacobian transposed")
    return None


def _swapped(verdict, a, t, finite, inputs, tolerances) -> Finding | None:
    """The gradients of two inputs returned in each other's place (same shapes)."""
    entries = verdict.entries
    for i in range(len(entries)):
        for j in range(i + 1, len(entries)):
            if entries[i].shape != entries[j].shape:
                continue
            products = [p.products for p in verdict.probes]
            truth = "reference" if "reference" in products[0] else "numerical"
            if not any(np.any(p["analytic"][i]) or np.any(p["analytic"][j]) for p in products):
                continue  # both zero: nothing is in the other's place
            if all(p[truth][j] is not None and _explains(p["analytic"][i], p[truth][j], tolerances)
                   and _explains(p["analytic"][j], p[truth][i], tolerances) for p in products):
                return Finding("swapped", f"the gradients of {entries[i].name} and {entries[j].name} are swapped",
                               f"for every random upstream, the backward's {entries[i].name} is the true {entries[j].name} and back",
                               f"gradients of {entries[i].name} and {entries[j].name} swapped")
    return None


def _reduction_dim(verdict, a, t, finite, inputs, tolerances) -> Finding | None:
    """A reduction over the wrong dim (3-D inputs and up): log|A/T| per element splits into a
    part that does not vary along one dim and a part that does not vary along another, as when
    a norm or mean is taken along dim q where the truth takes it along dim p."""
    for e in verdict.entries:
        if len(e.shape) < 3 or e.rows.size == 0:
            continue
        size = int(np.prod(e.shape))
        if np.bincount(e.cols, minlength=size).max() != 1:
            continue  # each element in one output only, so that A/T is a ratio per element
        analytic, truth = e.values["analytic"], _truth(e.values)
        ok = np.isfinite(analytic) & np.isfinite(truth) & (analytic != 0) & (truth != 0)
        if not ok.all() or _explains(analytic, truth, tolerances):
            continue
        log_ratio = np.zeros(size)
        log_ratio[e.cols] = np.log(np.abs(analytic / truth))
        log_ratio = log_ratio.reshape(e.shape)
        # the dim the truth reduces over: the one along which one output's elements vary
        first = e.cols[e.rows == e.rows[0]]
        varying = [d for d, index in enumerate(np.unravel_index(first, e.shape)) if np.ptp(index) > 0]
        for p in varying:
            for q in range(len(e.shape)):
                if p != q and _splits(log_ratio, p, q, 1e-6 if "reference" in e.values else tolerances.rtol):
                    return Finding("reduction dim", f"reduces over the wrong dim: dim {q} of {e.name} instead of dim {p}",
                                   f"analytic / truth = f(without dim {p}) / g(without dim {q}) at every element of {e.name}",
                                   f"reduces over dim {q}, not dim {p}")
    return None


def _splits(values: np.ndarray, p: int, q: int, within: float = 1e-6) -> bool:
    """Whether values = f(index without dim p) + h(index without dim q) (two-way additive), to
    ``within`` (a log-ratio from finite differences carries their relative error)."""
    centred = values - values.mean(axis=p, keepdims=True) - values.mean(axis=q, keepdims=True) + values.mean(axis=(p, q), keepdims=True)
    return bool(np.abs(centred).max() < within) and bool(np.ptp(values) > 10 * within)


def _region(verdict, a, t, finite, inputs, tolerances) -> Finding | None:
    """Wrong only at some elements of an input, told by where they are (whole slices along a dim:
    its boundary, a given index; one element) or, failing that, by a simple condition on their
    values (|x| > k, x < 0, …): the elements wrong in an entry or in a probe's product, against the
    rest. Position is tried first: on a small input a band of values can fit a few boundary
    elements by chance. ``confirm`` holds either to a second point before it is named."""
    for i, (e, x) in enumerate(zip(verdict.entries, inputs)):
        size = int(np.prod(e.shape)) if e.shape else 1
        bad_cols = np.zeros(size, dtype=bool)
        excess = compare_entries(e.values["analytic"], {"truth": _truth(e.values)}, tolerances).excess
        bad_cols[e.cols[excess > 0]] = True
        for probe in verdict.probes:
            truth = "reference" if "reference" in probe.products else "numerical"
            if probe.products[truth][i] is not None:
                excess = compare_entries(probe.products["analytic"][i], {"truth": probe.products[truth][i]}, tolerances).excess
                bad_cols |= excess > 0
        if not bad_cols.any() or bad_cols.all():
            continue
        evidence = f"{int(bad_cols.sum()):,} of {bad_cols.size:,} elements of {e.name} are wrong, exactly those"
        shape = tuple(e.shape) if e.shape else (1,)
        placed = _position(bad_cols.reshape(shape), e.name)
        if placed:
            words, where, short = placed
            return Finding("position", f"wrong only at {words}", evidence, f"wrong only at {short}", (i, _always(where)))
        flat = np.asarray(x, dtype=np.float64).reshape(-1)
        found = _condition(flat, bad_cols, e.name)
        if found:
            words, holds = found
            return Finding("region", f"wrong only where {words}", evidence, "", (i, holds))
    return None


def _always(where: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A prediction that names the same elements whatever the input's values."""
    return lambda _values: where


def _position(bad: np.ndarray, name: str) -> tuple[str, np.ndarray, str] | None:
    """The wrong elements as whole slices along one dim (its first or last positions, or given
    ones), or as one element: (words, the mask, flat, and the words in short)."""
    if bad.sum() == 1:
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        at = f"{name}[{', '.join(map(str, index))}]"
        return at, bad.reshape(-1).copy(), at
    for d, n in enumerate(bad.shape):
        positions = np.flatnonzero(bad.any(axis=tuple(k for k in range(bad.ndim) if k != d)))
        if positions.size == n or positions.size > max(n // 2, 1):
            continue
        slices = np.zeros(n, dtype=bool)
        slices[positions] = True
        whole = np.broadcast_to(slices.reshape([-1 if k == d else 1 for k in range(bad.ndim)]), bad.shape)
        if not np.array_equal(whole, bad):
            continue
        at_position = lambda p, d=d: ", ".join(str(p) if k == d else ":" for k in range(bad.ndim))  # noqa: E731
        shown = " and ".join(f"{name}[{at_position(int(p))}]" for p in positions[:4]) + ("…" if positions.size > 4 else "")
        edge = np.all((positions < positions.size) | (positions >= n - positions.size))  # packed against the ends
        short = f"{name}'s boundary along dim {d}" if edge else f"{positions.size} slices of {name} along dim {d}"
        return shown + (f", the boundary along dim {d}" if edge else f", along dim {d}"), whole.reshape(-1).copy(), short
    return None


def _condition(x: np.ndarray, bad: np.ndarray, name: str) -> tuple[str, Callable[[np.ndarray], np.ndarray]] | None:
    """A threshold or band on x or |x| that holds exactly at the wrong elements: its words, and
    the condition as a function of (flat) values."""
    for label, magnitude in ((f"|{name}|", True), (name, False)):
        values = np.abs(x) if magnitude else x
        at = (lambda v: np.abs(v)) if magnitude else (lambda v: v)  # noqa: E731
        good = values[~bad & np.isfinite(values)]
        wrong = values[bad & np.isfinite(values)]
        if good.size and wrong.size:
            if wrong.min() > good.max():
                k = _between(good.max(), wrong.min())
                return f"{label} > {k}", lambda v, k=float(k), at=at: at(v) > k
            if wrong.max() < good.min():
                k = _between(wrong.max(), good.min())
                return f"{label} < {k}", lambda v, k=float(k), at=at: at(v) < k
            inside = (good >= wrong.min()) & (good <= wrong.max())
            if not inside.any() and (good < wrong.min()).any() and (good > wrong.max()).any():  # a band: 1 < |x| ≤ 2, say
                low, high = good[good < wrong.min()].max(), good[good > wrong.max()].min()
                below, above = _between(low, wrong.min()), _between(wrong.max(), high)
                lo, hi = float(below), float(above)
                lo_in, hi_in = lo == wrong.min(), hi == wrong.max()
                words = f"{below} {'≤' if lo_in else '<'} {label} {'≤' if hi_in else '<'} {above}"
                return words, lambda v, lo=lo, hi=hi, lo_in=lo_in, hi_in=hi_in, at=at: (
                    ((at(v) >= lo) if lo_in else (at(v) > lo)) & ((at(v) <= hi) if hi_in else (at(v) < hi)))
    return None


def confirm(diagnosis: Diagnosis, wrong_at: Callable[[int], tuple[np.ndarray, np.ndarray] | None]) -> Diagnosis:
    """The diagnosis with each story about some elements held to a second point: ``wrong_at(i)``
    gives input i's flat values there and which of its elements are wrong there (None: it cannot
    tell). A story is kept where the elements it predicts and those wrong there mostly coincide
    (their overlap at least half their union: a threshold read from one point is approximate);
    else it is dropped, having fit this point by chance."""
    kept = []
    for finding in diagnosis.findings:
        if finding.predicts is not None:
            index, predicts = finding.predicts
            there = wrong_at(index)
            if there is not None:
                values, wrong = there
                predicted = np.asarray(predicts(values), dtype=bool)
                union = int((predicted | wrong).sum())
                overlap = int((predicted & wrong).sum()) / union if union else 1.0
                if overlap < 0.5:
                    continue
                finding = replace(finding, evidence=finding.evidence + f"; at a second point, the elements it predicts and those wrong "
                                  f"there overlap by {overlap:.0%} of their union")
        kept.append(replace(finding, predicts=None))  # held to its second point: a report keeps data, not functions (it is pickled)
    return Diagnosis(tuple(kept))


def _between(low: float, high: float) -> str:
    """A round number between low and high, for the words."""
    for digits in range(0, 6):
        for candidate in (round(high, digits), round(low, digits)):
            if low <= candidate <= high:
                return f"{candidate:g}"
    return f"{(low + high) / 2:.3g}"


def _upstream(verdict, tolerances, others: Sequence[Finding] = ()) -> list[Finding]:
    """How the backward uses grad_output, from the probes: ignored (the same product for every
    upstream), reduced (a product that follows the upstream's mean or sum only), permuted
    across outputs (rolled), or otherwise mixed or not linear in it; and a term it adds."""
    probes = verdict.probes
    if len(probes) < 2:
        return []
    products = [_flat(probe.products["analytic"]) for probe in probes]
    if all(np.all(np.isfinite(p)) for p in products) and np.allclose(products[0], products[1], rtol=1e-9, atol=0) and np.any(products[0]):
        return [Finding("grad_output ignored", "grad_output ignored",
                        "the backward gives the same gradient for two different random upstream gradients")]
    column_sums = _ones_product(verdict)
    if column_sums is not None:
        for name, reduce in (("mean", np.mean), ("sum", np.sum)):
            if all(_explains(product, reduce(probe.upstream) * column_sums, tolerances) for probe, product in zip(probes, products)):
                return [Finding("grad_output reduced", f"grad_output reduced to its {name} before use",
                                f"for every random upstream u, the backward gives {name}(u) × the gradient for an upstream of ones")]
    found = []
    zero = np.concatenate(verdict.zero) if verdict.zero else np.zeros(0)
    if zero.size and np.any(np.isfinite(zero) & (zero != 0)):
        found.append(Finding("added term", "a term that does not depend on grad_output is added",
                             f"for a zero upstream gradient the backward returns up to {np.nanmax(np.abs(zero)):.3g}, not 0",
                             "adds a term without grad_output"))
    if found or others:
        return found
    if not verdict.linear:
        return [Finding("not linear", "the backward is not linear in grad_output",
                        "for random upstream gradients u₁ and u₂, b(u₁ + u₂) ≠ b(u₁) + b(u₂) or b(2u₁) ≠ 2·b(u₁)")]
    off = verdict.off_pattern
    if off is not None and verdict.coverage.structural == 0:  # the truth is zero everywhere, yet a gradient flows
        return [Finding("surrogate", "the true Jacobian is zero at every entry here (a locally constant forward, such as round or sign), "
                        "yet the backward passes a gradient: if it is an intended surrogate (straight-through), declare it with surrogate=",
                        f"the formula's backward has ∂out / ∂{off.input} entries of up to {abs(off.value):.3g} where finite differences "
                        "of its forward are 0", "a gradient where forward is flat: a surrogate?")]
    entries = [e for e in verdict.entries if e.rows.size]
    entries_right = all(not (compare_entries(e.values["analytic"], {"truth": _truth(e.values)}, tolerances).excess > 0).any()
                        for e in entries)
    beyond = verdict.found is not None and verdict.found.kind == "off pattern"  # more than the entries account for, not located
    if (off is not None or beyond) and entries and entries_right:
        where = (f"an entry where the true Jacobian is zero (∂out[{off.row}] / ∂{name_element(off.input, off.shape, off.col)} is "
                 f"{off.value:.6g})" if off is not None else
                 f"products beyond what its entries account for (at {name_element(verdict.found.input, verdict.found.shape, verdict.found.element)})")
        found.append(Finding("grad_output mixed", "grad_output mixed across outputs",
                             f"every one of the truth's {verdict.coverage.compared:,} nonzero Jacobian entries is right, yet the "
                             f"backward has {where}"))
    return found


def _rolled(verdict, tolerances) -> Finding | None:
    """uᵀA = (roll u)ᵀT for a shift of the upstream along one of the output's dims."""
    shape = verdict.output_shape
    for axis in range(len(shape)):
        for shift in (1, -1):
            def rolled_matches(probe) -> bool:
                u = np.roll(probe.upstream.reshape(shape), shift, axis=axis).reshape(-1)  # noqa: B023 - called at once, below
                for i, e in enumerate(verdict.entries):
                    predicted = np.bincount(e.cols, weights=np.nan_to_num(u[e.rows] * _truth(e.values)),
                                            minlength=probe.products["analytic"][i].size)
                    if not _explains(probe.products["analytic"][i], predicted, tolerances):
                        return False
                return True
            if all(rolled_matches(p) for p in verdict.probes):
                return Finding("grad_output rolled", f"grad_output permuted across outputs (rolled by {shift} along output dim {axis})",
                               "for every random upstream u, the backward gives the true gradient for u rolled", "grad_output rolled across outputs")
    return None


def _flat(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Per-input arrays as one flat array (no copy for one input: at scale it holds millions)."""
    return parts[0].reshape(-1) if len(parts) == 1 else np.concatenate([p.reshape(-1) for p in parts])


def _ones_product(verdict) -> np.ndarray | None:
    """1ᵀT from the entries: the true gradient for an upstream of ones. None at scale, where the
    entries are sampled rows only."""
    if not verdict.entries or verdict.coverage.sampled:
        return None
    parts = []
    for e in verdict.entries:
        size = int(np.prod(e.shape)) if e.shape else 1
        truth = _truth(e.values)
        ok = np.isfinite(truth)
        parts.append(np.bincount(e.cols[ok], weights=truth[ok], minlength=size))
    return np.concatenate(parts)


def _rank_one_term(verdict, tolerances) -> Finding | None:
    """A − T of rank one within each block of outputs sharing their inputs (softmax's missing
    projection −y yᵀ, say)."""
    if sum(e.rows.size for e in verdict.entries) > MAX_ENTRIES_BY_HAND:
        return None
    for e in verdict.entries:
        d = e.values["analytic"] - _truth(e.values)
        if not np.all(np.isfinite(d)):
            continue
        blocks: dict[tuple, list[int]] = {}
        cols_of_row: dict[int, list[int]] = {}
        for k, (r, _c) in enumerate(zip(e.rows.tolist(), e.cols.tolist())):
            cols_of_row.setdefault(r, []).append(k)
        for r, ks in cols_of_row.items():
            blocks.setdefault(tuple(sorted(e.cols[ks].tolist())), []).append(r)
        ranks = []
        for cols, rows in blocks.items():
            if len(rows) < 2 or len(cols) < 2:
                continue
            index = {c: j for j, c in enumerate(cols)}
            block = np.zeros((len(rows), len(cols)))
            for i, r in enumerate(rows):
                for k in cols_of_row[r]:
                    block[i, index[int(e.cols[k])]] = d[k]
            s = np.linalg.svd(block, compute_uv=False)
            # rank one up to the judged dtype's rounding (float32's for a kernel judged in it), never looser than 1e-8 asks in float64
            ranks.append(s[1] <= max(1e-8, 100 * tolerances.rounding) * max(s[0], 1e-300) and s[0] > tolerances.atol)
        if ranks and all(ranks):
            return Finding("rank-one term", "a term of rank one per block of outputs is missing or extra (a projection such as −y yᵀ)",
                           f"analytic − truth has rank 1 in each of the {len(ranks)} blocks of {e.name}'s Jacobian",
                           "a rank-one term missing or extra (−y yᵀ?)")
    return None
