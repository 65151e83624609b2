"""Gradient Lab's verdict as a pytest assertion, for any callable or ``autograd.Function``:

    from gradient_lab import assert_gradients_match
    assert_gradients_match(MyFunction, (x, y), reference=my_reference, order=2)

It runs what the app runs (the whole-Jacobian verdict with its coverage, the diagnosis, and with
``order=2`` the double backward) and raises ``AssertionError`` with a message written to be read
in a CI log: why the backward is wrong, its worst element with the three values there, and what
the verdict covered. Without a ``reference``, finite differences of the function itself are the
truth. Tolerances default to the inputs' dtype's (``engine.tolerances``) and can be overridden.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .present import notebook  # noqa: F401 - registers how reports show in notebooks and consoles
from .present.cards import stage_lines

from .engine.report import GradientReport
from .engine.options import CheckOptions
from .engine.pipeline import compare_gradients
from .app.family import Family, Formula, checked_batch_dims, sum_of_outputs
from .engine.signature import differentiable, function_class, name_index
from .engine.finding import truth_label
from . import observers
from .errors import LabError
from .engine.judge import compare_entries, truth_scale

Tensor = torch.Tensor
Checked = Callable[..., Any] | type[torch.autograd.Function]  # what the assertion checks: a callable, or a Function class
WIDTH = 100  # a CI log's line
# Called with (report, order, the Function's name) after every assert_gradients_match: the pytest
# plugin's --gradient-report listens here (``testing.OBSERVERS``, a public hook, kept in a module that
# imports nothing so that the plugin can reach it without torch).
OBSERVERS = observers.OBSERVERS


def _callable(function: Checked) -> Callable[..., Any]:
    if isinstance(function, type) and issubclass(function, torch.autograd.Function):
        return function.apply
    if not callable(function):
        raise TypeError(f"assert_gradients_match needs a callable or an autograd.Function subclass, not {type(function).__name__}")
    return function


def _name(function: Checked) -> str:
    owner = function_class(function)  # MyFunction.apply: the Function's own name
    if owner is not None:
        return owner.__name__
    return getattr(function, "__qualname__", None) or getattr(function, "__name__", None) or type(function).__name__


def as_family(function: Checked, inputs: Sequence[Tensor], reference: Callable[..., Any] | None = None, name: str | None = None,
              surrogate: Callable[..., Any] | None = None, order: int = 2,
              batch_dims: Sequence[int | None] | None = None, kernel: bool | None = None) -> Family:
    """A family of one formula, ``function``, on ``inputs`` as given: what the engine needs, and no
    more (nothing registered, no input builder)."""
    names = ("x",) if len(inputs) == 1 else tuple(f"x{i + 1}" for i in range(len(inputs)))
    title = name or _name(function)
    return Family(name=title, title=title, description="", input_names=names, reference=reference,
                  formulas={title: Formula(title, _callable(function), "under test", "", False)},
                  build_inputs=lambda *_args, **_kwargs: tuple(inputs), loss=sum_of_outputs, surrogate=surrogate, order=order,
                  batch_dims=checked_batch_dims(batch_dims, len(inputs)), kernel=kernel)


def check_gradients(function: Checked, inputs: Tensor | Sequence[Tensor], *, reference: Callable[..., Any] | None = None,
                    surrogate: Callable[..., Any] | None = None, order: int = 1, seed: int = 0,
                    step: float | None = None, atol: float | None = None, rtol: float | None = None,
                    conditions: str = "default", parity: bool | str | Sequence[str] = False,
                    dtype: torch.dtype | None = None, determinism: int | None = None, batch_invariant: bool = True,
                    provenance: str = "auto", training: int = CheckOptions.training,
                    batch_dims: Sequence[int | None] | None = None, kernel: bool | None = None) -> GradientReport:
    """The app's gradient report for ``function`` on ``inputs`` (copies; the inputs are not changed).
    ``surrogate``: plain torch ops whose autograd gradient is the intended one (see ``declare``);
    ``order=1``: the second order is not checked; ``conditions``: "default", "all" or "none" (the
    verdict again with requires_grad subsets, grad_output and input layouts, aliasing, sizes, ties);
    ``parity``: True (every path), a set ("quick": no inductor) or path keys (``engine.parity.PATHS``):
    the gradient again under torch.compile, torch.func and double backward. ``dtype``: the
    floating-point inputs cast to it first; below float64 the verdict is also the precision
    verdict (``engine.precision``: the gradient's error in that dtype at most twice the reference's
    in the same dtype, against float64 from the same values), with tolerances for assert_close.
    Tolerances' fresh draws are the given values shuffled. ``determinism`` (runs): the backward that
    many times, bitwise, and a row alone and among other rows (``batch_invariant=False``: its
    gradient depends on the batch by design). ``provenance``: "auto" traces where a non-finite value
    of the formula's was born wherever its truth is finite, "always" wherever it is not finite at all,
    "never". ``training``: steps of gradient descent with the formula's gradient beside the truth's
    (0: none). ``batch_dims``: per input, its batch dim or None (kept whole), as vmap's ``in_dims``:
    what the empty-batch and one-row conditions cut (default: inferred from the Jacobian's pattern).
    ``kernel=True``: a fused kernel (Triton, CUDA) that autograd cannot see into, as ``declare``'s; by default (None) one
    that launches Triton kernels is detected as one, and ``kernel=False`` says it is not.
    The defaults are ``CheckOptions``'s."""
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    if dtype is not None:
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating-point torch.dtype, not {dtype!r}")
        inputs = tuple(x.to(dtype) if isinstance(x, Tensor) and x.is_floating_point() else x for x in inputs)
    if not all(isinstance(x, Tensor) for x in inputs) or not any(differentiable(x) for x in inputs):
        raise TypeError("inputs must be one floating-point tensor or a sequence of tensors with at least one floating-point "
                        "tensor among them (integer and boolean ones are passed through, never differentiated)")
    if any(x.layout != torch.strided for x in inputs):
        raise LabError("sparse inputs (layout " + ", ".join(sorted({str(x.layout).removeprefix('torch.') for x in inputs
                                                                     if x.layout != torch.strided})) +
                       ") are not supported yet: the verdict perturbs and compares dense tensors; check the Function on "
                       "x.to_dense() where it accepts one")
    copies = tuple(x.detach().clone() for x in inputs)
    options = CheckOptions(order=order, seed=seed, step=step, atol=atol, rtol=rtol, conditions=conditions, parity=_parity_paths(parity),
                           determinism=determinism or 0, batch_invariant=batch_invariant, provenance=provenance, training=training)
    family = as_family(function, copies, reference, surrogate=surrogate, order=order, batch_dims=batch_dims, kernel=kernel)
    return compare_gradients(family, family.name, copies, options=options)


def _parity_paths(parity: bool | str | Sequence[str]) -> str | tuple[str, ...] | None:
    return "all" if parity is True else None if parity is False or parity is None else parity if isinstance(parity, str) else tuple(parity)


def assert_gradients_match(function: Checked, inputs: Tensor | Sequence[Tensor], reference: Callable[..., Tensor] | None = None, *,
                           surrogate: Callable[..., Tensor] | None = None, order: int = 1, seed: int = 0, step: float | None = None,
                           atol: float | None = None, rtol: float | None = None, conditions: str = "default",
                           parity: bool | str | Sequence[str] = False, dtype: torch.dtype | None = None,
                           determinism: int | None = None, batch_invariant: bool = True,
                           batch_dims: Sequence[int | None] | None = None, kernel: bool | None = None) -> GradientReport:
    """Raise AssertionError unless ``function``'s backward matches the truth on every Jacobian
    entry at ``inputs`` (and, with ``order=2``, its double backward does too, or is not
    differentiable by design, ``@once_differentiable``); return the report. ``surrogate``: the
    intended gradient, where it is not the derivative of forward (see ``declare``). ``conditions``:
    which conditions the match must also hold under ("default", "all", "none"). ``parity``: True, a
    set ("quick") or path keys: the match must also hold however it is run (torch.compile, torch.func,
    double backward), with no path that differs or raises; it compiles, so it takes seconds.
    ``dtype`` (torch.bfloat16, torch.float16, torch.float32): the inputs cast to it, and the match
    must also hold as precision: no worse than the reference run in that dtype (``check_gradients``).
    ``determinism`` (runs): the backward must also be bitwise the same run after run and, unless
    ``batch_invariant=False``, for a row alone and among other rows. A non-finite gradient's message
    names where it was born (the op, the line, the element, the cause and its fix). ``batch_dims``:
    as ``check_gradients``'s."""
    report = check_gradients(function, inputs, reference=reference, surrogate=surrogate, order=order, seed=seed, step=step,
                             atol=atol, rtol=rtol, conditions=conditions, parity=parity, dtype=dtype, determinism=determinism,
                             batch_invariant=batch_invariant, batch_dims=batch_dims, kernel=kernel)
    for observe in OBSERVERS:
        observe(report, order, _name(function))
    if report.passed(order) and not (report.parity is not None and report.parity.parted) and not (
            report.determinism is not None and report.determinism.flagged):
        return report
    raise AssertionError(failure_message(report, order))


def failure_message(report: GradientReport, order: int = 1) -> str:
    """What went wrong, for a CI log: the diagnosis first, then the worst element and the coverage."""
    wrap = lambda text, lead="  ": textwrap.fill(text, WIDTH, initial_indent=lead, subsequent_indent=lead + "  ")  # noqa: E731
    took = f"; checked in {report.seconds:.2g} s" if math.isfinite(report.seconds) else ""
    lines = [f"gradients of {report.formula} do not match the truth ({report.dtype} on {report.device}{took})"]
    if report.verdict.condition:  # right as gradcheck calls it, wrong as real code does
        lines.append(wrap(f"why: it fails only when {report.verdict.condition}: {report.verdict.finding}"))
    if report.diagnosis and report.diagnosis.findings:
        lines.append(wrap(f"why: {report.diagnosis.words}"))
        lines += [wrap(f"evidence: {f.evidence}", "    ") for f in report.diagnosis.findings]
    elif report.failure:
        lines.append(wrap(f"why: the formula raised: {report.failure}"))
    worst = _worst_drawn(report) if report.precision is None else ""  # below float64 the precision lines say where
    if worst:
        lines.append(wrap(worst))
    lines += [wrap(line) for line in precision_lines(report)]
    if report.provenance is not None:  # where the first non-finite value came from
        lines.append(wrap(f"not finite: {report.provenance.describe()}"))
    if report.determinism is not None and report.determinism.flagged:
        lines.append(wrap(f"determinism: {report.determinism.describe()}"))
    for cell in report.parity.parted if report.parity is not None else ():  # right in eager, not as it is run
        lines.append(wrap(f"parity: {cell.outcome} under {cell.label}: {cell.finding}"))
    for outcome, line in stage_lines(report):  # the other stages: does it train, …
        lines.append(wrap(f"{line} [{outcome}]"))
    lines.append(wrap(f"first order {report.verdict.summary}"))
    if order == 2:
        second = report.second_order
        lines.append(wrap(f"second order {second.outcome}: {second.summary}" if second else "second order: not checked"))
    return "\n".join(lines)


def precision_lines(report: GradientReport) -> list[str]:
    """Below float64: the precision verdict's line, and per input the tolerances a test can use."""
    precision = report.precision
    if precision is None:
        return []
    lines = [f"precision: {precision.finding() or precision.describe()}"]
    for r in precision.results:
        t = r.tolerance if r.passed else r.baseline_tolerance
        if t is not None and t.usable:
            whose = "" if r.passed else f" (what {precision.baseline_words} needs; this formula fails)"
            lines.append(f"tolerances for {r.name}{whose}: assert_close(atol={t.atol:.2g}, rtol={t.rtol:.2g}) fails under "
                         f"1 in {1 / t.rate:,.0f} draws ({t.draws} fresh draws fitted, {t.failures} failing)")
    return lines


def _worst_drawn(report: GradientReport) -> str:
    """The drawn gradient's worst element with its three values, where it is wrong at all (an
    upstream of ones can hide a bug that only random upstreams show: then the verdict says where).
    Judged against the truth the verdict used for that input: the reference (or surrogate) where
    it was one, else finite differences."""
    worst, text = 0.0, ""
    coverage = report.jacobian.coverage if report.jacobian is not None else None
    for comparison in report.inputs:
        trusted = coverage is not None and coverage.judged_by_reference(comparison.name)
        source = "reference" if trusted else "numerical"
        index, values = comparison.worst(("analytic", source))
        if index is None or not values:
            continue
        scale = truth_scale({"reference": comparison.gradients[source]})
        excess = float(compare_entries(np.array([values["analytic"]]), {"reference": np.array([values[source]])},
                                       report.tolerances, scale=scale).excess[0])
        if excess > worst:
            where = name_index(comparison.name, index)
            shown = [f"analytic {values['analytic']:.6g}", f"numerical {values['numerical']:.6g}"]
            if trusted and coverage is not None:
                shown.insert(1, f"{truth_label('reference', coverage.role)} {values['reference']:.6g}")
            worst, text = excess, f"worst element of the gradient of sum(output): {where}: {', '.join(shown)}"
    return text
