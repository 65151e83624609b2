"""Plain data out of one gradient report, for the Gradient check page: a comparison cut down to
what a heatmap can draw, one row per element for a CSV, and a summary for a JSON download.

Nothing here imports streamlit or computes gradients; it reads ``lib.engine.report``'s results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..engine.report import PAIRS, SOURCES, GradientReport, InputComparison, error_map
from ..engine.precision import ULP_EDGES
from ..engine.kernels import describe_writes
from .cards import OWN_LINES

# Heatmaps build one hover label per element: above this many, only a leading block is drawn.
DRAW_LIMIT = 20_000
# Rows of the per-element CSV: beyond this the download is cut (ui.download builds it on every rerun).
ROW_LIMIT = 50_000


def shown(value: float, spec: str = ".4g") -> str:
    """``value`` formatted by ``spec``, or NaN / Inf / −Inf in words."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "−Inf"
    return format(value, spec)


def pair_name(pair: tuple[str, str]) -> str:
    """``("analytic", "reference")`` -> ``"analytic-reference"``: a column name and a URL value."""
    return "-".join(pair)


# ---- a comparison small enough to draw --------------------------------------------------------------


def leading_block(shape: tuple[int, ...], limit: int = DRAW_LIMIT) -> tuple[int, ...]:
    """The largest leading block ``[:k0, :k1, ...]`` of ``shape`` with at most ``limit`` elements
    that keeps trailing dims whole while they fit: whole rows first, then part of one row."""
    kept = list(shape)
    room = max(int(limit), 1)
    for d in reversed(range(len(shape))):
        kept[d] = max(1, min(shape[d], room))
        room = max(1, room // kept[d])
    return tuple(kept)


@dataclass(frozen=True)
class Drawn:
    """What the heatmaps draw of one input: ``comparison`` is the whole one or its leading block."""

    comparison: InputComparison
    shape: tuple[int, ...]  # the input's full shape
    shown: tuple[int, ...]  # the block drawn

    @property
    def cut(self) -> bool:
        return self.shown != self.shape

    def describe(self) -> str:
        """In words, what is drawn and what is not; "" when everything is."""
        if not self.cut:
            return ""
        name = self.comparison.name
        block = ", ".join(f":{k}" if k < n else ":" for k, n in zip(self.shown, self.shape))
        return (
            f"{name} has {math.prod(self.shape):,} elements, too many to draw one by one: the maps show "
            f"its first rows only, {name}[{block}] ({math.prod(self.shown):,} elements), and their "
            "titles' maxima are over those. The worst-elements table, the histogram and the CSV cover every element."
        )


def drawable(comparison: InputComparison, limit: int = DRAW_LIMIT) -> Drawn:
    """``comparison`` cut to its leading block of at most ``limit`` elements (see ``leading_block``),
    with the error maps recomputed on the block, so that worst-element marks fall inside it."""
    shape = tuple(comparison.gradients["reference"].shape)
    shown = leading_block(shape, limit)
    if shown == shape:
        return Drawn(comparison, shape, shape)
    block = tuple(slice(0, k) for k in shown)
    gradients = {source: values[block] for source, values in comparison.gradients.items()}
    errors = {pair: error_map(pair, gradients[pair[0]], gradients[pair[1]]) for pair in comparison.errors}
    return Drawn(replace(comparison, gradients=gradients, errors=errors, jacobians=None), shape, shown)


# ---- downloads ---------------------------------------------------------------------------------------


def element_rows(report: GradientReport, limit: int = ROW_LIMIT) -> tuple[list[dict], int]:
    """One row per element of every input: its index, the three gradients, and for each pair the
    signed error a − b and the relative error |a − b| / |b|. At most ``limit`` rows (inputs in
    order); returns (rows, how many elements were left out)."""
    rows: list[dict] = []
    total = 0
    for c in report.inputs:
        shape = c.gradients["reference"].shape
        n = int(np.prod(shape, dtype=np.int64))
        total += n
        take = max(0, min(n, limit - len(rows)))
        if not take:
            continue
        columns = {source: c.gradients[source].reshape(-1)[:take].tolist() for source in SOURCES}
        for pair in PAIRS:
            columns[pair_name(pair)] = c.errors[pair].signed.reshape(-1)[:take].tolist()
        for pair in PAIRS:
            columns[f"relative {pair_name(pair)}"] = c.errors[pair].relative.reshape(-1)[:take].tolist()
        indices = np.unravel_index(np.arange(take), shape) if shape else ()
        labels = ["[" + ", ".join(map(str, index)) + "]" for index in zip(*(i.tolist() for i in indices))] if shape else ["[]"]
        names = list(columns)
        for k, label in enumerate(labels):
            rows.append({"input": c.name, "index": label, **{name: columns[name][k] for name in names}})
    return rows, total - len(rows)


def summary(report: GradientReport, case=None) -> dict:
    """The report without its arrays: verdict, headline numbers, tolerances and, per input, how the
    finite differences were taken and each pair's largest errors. JSON-ready once NaN is handled
    (``lib.ui.download`` writes NaN/Inf as strings)."""
    inputs = {}
    for c in report.inputs:
        inputs[c.name] = {
            "shape": list(c.gradients["reference"].shape),
            "finite differences": c.plan.source,
            "forward evaluations": c.plan.evaluations,
            "errors": {
                pair_name(pair): {
                    "max abs": e.max_abs,
                    "mean abs": e.mean_abs,
                    "max relative": e.max_rel,
                    "worst index": list(e.worst) if e.worst is not None else None,
                }
                for pair, e in c.errors.items()
            },
            "NaN/Inf": {what: {"nan": nf.nan, "inf": nf.inf} for what, nf in c.non_finite.items()},
            "jacobians computed": c.jacobians is not None,
        }
    return {
        "case": repr(case) if case is not None else None,
        "family": report.family,
        "formula": report.formula,
        "dtype": report.dtype,
        "device": report.device,
        "passed": report.verdict.passed,
        "outcome": report.verdict.outcome,
        "seconds": report.seconds,
        "kernel": _kernel(report),
        "verdict": report.verdict.summary,
        "coverage": _coverage(report),
        "diagnosis": [{"kind": f.kind, "words": f.words, "evidence": f.evidence} for f in report.diagnosis.findings] if report.diagnosis else [],
        "second order": {"outcome": report.second_order.outcome, "failed": report.second_order.failed,
                         "verdict": report.second_order.summary} if report.second_order else None,
        "upstream gradient drawn": report.upstream,
        "cosine to reference": report.cosine,
        "loss": report.loss,
        "max |formula output − reference output|": report.forward_max_error,
        "forward differs": report.verdict.forward or None,  # the formula's forward is not its reference's: the finding
        "forward evaluations": report.evaluations,
        "tolerances": {"step": report.tolerances.step, "atol": report.tolerances.atol, "rtol": report.tolerances.rtol},
        "failure": {"stage": report.failure.stage, "kind": report.failure.kind, "message": report.failure.message,
                    "when": report.failure.when or None} if report.failure else None,
        "signature": _signature(report),
        "failed condition": report.verdict.condition or None,  # the condition it fails under alone, where the plain verdict passes
        "conditions": _conditions(report),
        "parity": parity_data(report.parity),
        "precision": precision_data(report.precision),
        "provenance": provenance_data(report.provenance),
        "determinism": determinism_data(report.determinism),
        "finding": finding_data(report.verdict.found),
        **{name: stage_data(result) for name, result in report.stages.items() if name not in OWN_LINES},  # the others said above
        "notes": list(report.notes),
        "inputs": inputs,
    }




def stage_data(result) -> dict:
    """Any stage's result as JSON: its outcome, its line, and its fields (arrays as lists)."""
    def plain(value):
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if hasattr(value, "__dataclass_fields__"):
            return {f: plain(getattr(value, f)) for f in value.__dataclass_fields__}
        return value

    return {"outcome": result.outcome, "summary": result.describe(), **plain(result)}


def finding_data(found) -> dict | None:
    """What the failing verdict found, as facts: its kind, where, its values, the upstream that showed it."""
    if found is None:
        return None
    return {"kind": found.kind, "input": found.input, "element": found.at, "output": found.output or None, "formula": found.formula,
            "truth": found.truth, "against": found.against or None, "shown by": found.shown_by, "probe": found.probe or None,
            "worst error": found.worst_error, "cosine": found.cosine, "wrong": found.wrong, "compared": found.compared}


def _conditions(report: GradientReport) -> dict | None:
    """Each condition the verdict ran under, and its outcome."""
    if report.conditions is None:
        return None
    failure = lambda f: {"stage": f.stage, "kind": f.kind, "message": f.message} if f is not None else None  # noqa: E731
    return {"covered": report.conditions.describe(), "notes": list(report.conditions.notes),
            "results": [{"name": r.name, "group": r.group, "outcome": r.outcome, "finding": r.finding or None, "worst": r.worst or None,
                         "failure": failure(r.failure)} for r in report.conditions.results]}


def parity_data(parity) -> dict | None:
    """The parity grid (``lib.engine.parity``): one entry per cell, the graph breaks, the canary,
    and a custom op's opcheck tests."""
    if parity is None:
        return None
    cell = lambda c: {"path": c.key, "group": c.group, "label": c.label, "outcome": c.outcome, "finding": c.finding or None,  # noqa: E731
                      "worst": c.worst or None, "error": c.error or None, "whose": c.whose or None, "graphs": c.graphs,
                      "recompiles": c.recompiles, "bypassed": c.bypassed, "note": c.note or None, "seconds": round(c.seconds, 3)}
    return {"kind": parity.kind, "summary": parity.describe(), "cells": [cell(c) for c in parity.cells],
            "graph breaks": list(parity.graph_breaks), "canary": parity.canary, "compiler": parity.compiler,
            "opcheck": [{"test": t.name, "passed": t.passed, "message": t.message or None} for t in parity.opcheck],
            "seconds": round(parity.seconds, 3)}


def provenance_data(provenance) -> dict | None:
    """Where the first non-finite value was born (``lib.engine.provenance``); None where all is finite."""
    if provenance is None:
        return None
    event = lambda e: None if e is None else {"op": e.op, "derivative of": e.derivative or None,  # noqa: E731
                                              "phase": e.phase, "line": e.line or None, "element": e.element,
                                              "inputs": list(e.inputs), "result": e.result, "count": e.count,
                                              "cause": e.cause or None, "fix": e.fix or None}
    return {"summary": provenance.describe(), "born": event(provenance.born), "became NaN": event(provenance.became_nan),
            "error": provenance.error or None}


def determinism_data(determinism) -> dict | None:
    """The backward run again and again, and a row alone and among other rows (``lib.engine.determinism``)."""
    if determinism is None:
        return None
    batch = determinism.batch
    return {"summary": determinism.describe(), "runs": determinism.runs, "deterministic": determinism.deterministic,
            "nondet_tol": determinism.nondet_tol, "gradcheck passes with it": determinism.gradcheck,
            "gradcheck message": determinism.gradcheck_message or None, "device": determinism.device,
            "inputs": [{"name": s.name, "varying": int(s.varying.size), "max spread": s.max_spread, "bits": s.bits, "worst": s.worst or None}
                       for s in determinism.spreads],
            "batch": None if batch is None else {"outcome": batch.outcome, "summary": batch.words,
                                                 "rows": [{"row": c.row, "input": c.input, "where": c.where, "outcome": c.outcome,
                                                           "difference": c.difference} for c in batch.rows]}}


def precision_data(precision) -> dict | None:
    """The precision verdict (``lib.engine.precision``): per input and for the output, the formula's
    errors beside the baseline's, the rule's numbers and the suggested tolerances; None in float64."""
    if precision is None:
        return None
    stats = lambda e: {"max abs error": e.max_error, "max ULP": e.max_ulp, "relative RMSE": e.rel_rmse, "SNR dB": e.snr_db,  # noqa: E731
                       "mismatch": e.mismatch, "non-finite": e.non_finite, "ULP histogram": [int(n) for n in e.ulp_counts]}
    tolerance = lambda t: None if t is None else {"atol": t.atol if t.usable else None, "rtol": t.rtol, "rate": t.rate,  # noqa: E731
                                                  "draws": t.draws, "failures in draws": t.failures, "non-finite draws": t.non_finite}

    def result(r):
        return {"name": r.name, "passed": r.passed, "ratio": r.ratio, "RMSE ratio": r.rmse_ratio, "baseline": r.baseline_kind,
                "formula": stats(r.formula), "baseline errors": stats(r.baseline), "allowed max abs error": r.allowed,
                "allowed relative RMSE": r.allowed_rmse, "noise floor": r.floor, "truth scale": r.scale, "compared": r.compared,
                "left out": r.left_out, "suggested tolerances": tolerance(r.tolerance),
                "baseline's tolerances": tolerance(r.baseline_tolerance)}

    return {"dtype": precision.dtype, "device": precision.device, "truth device": precision.truth_device, "k": precision.k,
            "passed": precision.passed, "ratio": precision.ratio, "summary": precision.describe(), "finding": precision.finding() or None,
            "baseline": precision.baseline_words, "probes": precision.probes, "draws": precision.draws,
            "ULP bins": [float(e) for e in ULP_EDGES], "failure": precision.failure or None,
            "inputs": [result(r) for r in precision.results], "output": result(precision.output) if precision.output else None}


def _signature(report: GradientReport) -> dict | None:
    """What the Function takes and gives: which inputs and outputs the verdict differentiates."""
    if report.signature is None:
        return None
    slot = lambda s: {"name": s.name, "shape": list(s.shape), "dtype": s.dtype, "differentiated": s.differentiable}  # noqa: E731
    return {"inputs": [slot(s) for s in report.signature.inputs], "outputs": [slot(s) for s in report.signature.outputs]}


def plan_sources(report: GradientReport) -> str:
    """How the finite differences were taken, input by input, in one line."""
    return "; ".join(f"{c.name}: {c.plan.source} ({c.plan.evaluations} evaluations)" for c in report.inputs)


def _coverage(report: GradientReport) -> dict | None:
    """What the whole-Jacobian verdict covered, in numbers."""
    if report.jacobian is None:
        return None
    c = report.jacobian.coverage
    return {"entries": c.entries, "structurally nonzero": c.structural, "compared one by one": c.compared,
            "left out (truth not finite)": c.excluded, "backward calls": c.backward_calls,
            "forward evaluations": c.forward_evaluations, "random probes": c.probes, "partial": c.partial or None,
            "truths": list(c.truths), "reference role": c.role, "reference not a truth for": list(c.unreproduced),
            "in words": c.describe()}


def _kernel(report) -> dict | None:
    """A fused kernel's facts (``engine.kernels``): its native precision and why, Triton's interpreter, its unseen writes."""
    kernel = report.kernel
    if kernel is None:
        return None
    native = kernel.native
    return {"fresh_graph_per_backward": True, "detected": kernel.detected, "interpreted": kernel.interpreted,
            "native": None if native is None else {"dtype": native.dtype, "raised_in": native.stage or None, "raised": native.kind or None,
                                                   "message": native.message or None,
                                                   "float64_output_error": None if native.stage else native.error},
            "writes": [{"into": w.target, "input": w.name, "stage": w.stage, "element": w.element, "before": w.before, "after": w.after}
                       for w in kernel.writes],
            "writes in words": [sentence for _, sentence in describe_writes(kernel.writes)]}
