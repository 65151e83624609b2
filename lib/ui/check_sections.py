"""Gradient check's sections, one function each: the verdict, a section per stage of the report
(``STAGE_SECTIONS``: conditions, precision, where a NaN was born; any other stage its line and its
curves), the opt-in checks (determinism, parity), the diagnosis, the maps element by element, the
tabs of further checks and the downloads. The page calls them in order."""

from __future__ import annotations

import math

import streamlit as st

from ..app import views
from ..app.devices import device_problem
from ..app.views import DEFAULT_JACOBIAN_LIMIT, FLOOR_EPS, PAIRS, RMSE_FLOOR_EPS
from ..present.cards import (OWN_LINES, conditions_line, determinism_line, drawn_upstream, parity_line, parity_rows, precision_failed,
                             precision_line, precision_rows, stage_title, styled_parity, condition_rows)
from ..present.figures.check import (conformance_table, diagnosis_scatter, error_heatmap, error_histogram, gradient_heatmaps,
                                     jacobian_heatmaps, parity_error_map, stage_curves, step_sweep_figure, worst_elements)
from ..present.figures.determinism import spread_map
from ..present.figures.precision import error_against_magnitude, ulp_histogram
from ..present.report_data import drawable, element_rows, pair_name, plan_sources, shown, summary
from ..present.reproduce import EMBEDDED_SHOWN, file_name, precision_test, python_snippet
from .cards import verdict_card
from .compute import compute, guard
from .downloads import download
from .show import badge, chart, sentence
from .sidebar import URL


def verdict(report) -> None:
    """The card, the headline numbers, how the truth was taken and what the maps draw."""
    verdict_card(report, key="check", wide=True)
    cosine, loss, evaluations, forward = st.columns(4)
    cosine.metric("Cosine to reference", shown(report.cosine, ".4f"), help="1: the gradient points the right way; −1: it is flipped.")
    loss.metric("Loss", shown(report.loss, ".6g"), help="The family's loss at the reference's output.")
    evaluations.metric("Forward evaluations", f"{report.evaluations:,}", help="What the finite differences cost, all inputs together.")
    forward.metric("Max |forward − reference|", shown(report.forward_max_error, ".3g"), help="The formula's output against the reference's.")
    st.caption(f"Finite differences (step {report.tolerances.step:g}, tolerance {report.tolerances.atol:g} + "
               f"{report.tolerances.rtol:g}·|b|): {plan_sources(report)}. "
               f"{f'Float64 on the {report.dtype} values' if report.precision else report.dtype} on {report.device}. "
               f"The maps below draw the gradient for {drawn_upstream(report)}.")
    for note in report.notes:
        st.warning(note, icon=":material/warning:")
    if report.failure and not report.inputs:  # no output at all: nothing to draw
        st.error(f"{report.failure.whose[:1].upper() + report.failure.whose[1:]} raised {report.failure}. No output was computed, so there are no "
                 "gradients to draw: fix its forward, then come back here.", icon=":material/error:")
        st.stop()
    if report.failure:
        st.error(f"The formula raised {report.failure}. Its gradients are blank below; the reference's are shown.", icon=":material/error:")
    if report.precision is None and report.dtype == "float64":
        st.caption("Precision: in float64 the verdict above is the whole story. Choose float32, bfloat16 or float16 in the sidebar "
                   "to judge the formula against PyTorch's own ops in that dtype, with tolerances a test can use.")


def conditions(case, formula, report) -> None:
    """The verdict again under each condition: where the Function will really run."""
    line = conditions_line(report)
    assert line is not None  # drawn where the conditions stage ran (STAGE_SECTIONS)
    with st.expander(f"Conditions: {line[1]}", expanded=bool(report.conditions.failed)):
        st.caption("The verdict again as real code calls the backward: with only some inputs requiring a gradient, "
                   "grad_output expanded (as .sum() hands it), transposed or a strided view, inputs transposed or "
                   "sliced, the same tensor passed twice, an empty batch or one row, tied values and kinks.")
        st.table(condition_rows(report), border="horizontal")
        for note in report.conditions.notes:
            st.caption(note[0].upper() + note[1:] + ".")


def precision(case, formula, report) -> None:
    """Below float64: against PyTorch's own in the same dtype, with tolerances a test can paste."""
    precision = report.precision
    st.subheader(f"Precision in {precision.dtype}")
    line = precision_line(report)
    if line is not None:
        st.markdown(f"{badge(line[0])} {line[1]}")
    where = (f"The formula and {precision.baseline_words} ran on {precision.device}, the float64 truth on {precision.truth_device}"
             if precision.baseline_kind != "rounding" else
             f"The formula ran on {precision.device}; without a reference in {precision.dtype}, its baseline is the float64 truth "
             f"rounded to {precision.dtype} (on {precision.truth_device})")
    st.caption(f"Is the difference a bug or rounding? The formula's gradient in {precision.dtype} and {precision.baseline_words} "
               f"are both compared with float64 computed from the same {precision.dtype} values (so rounding the inputs is not "
               f"held against it), for {precision.probes} upstream gradients. It passes when its largest error is at most "
               f"{precision.k:g}× the baseline's plus a noise floor of {FLOOR_EPS:g} eps at the truth's scale, and its relative RMSE "
               f"at most {precision.k:g}× the baseline's plus {RMSE_FLOOR_EPS:g} eps. {where}. The verdict, conditions and second order above "
               f"are float64 on the same values.")
    if precision.failure:
        st.error(precision.failure[0].upper() + precision.failure[1:] + ".", icon=":material/error:")
    else:
        st.dataframe(precision_rows(precision), hide_index=True, width="stretch")
        judged = precision.judged
        shown_result = judged[st.radio("Errors of", range(len(judged)), format_func=lambda i: judged[i].name, horizontal=True,
                                       key="check_precision_of") if len(judged) > 1 else 0]
        left, right = st.columns(2)
        with left:
            chart(ulp_histogram(shown_result, precision.dtype), key="check_precision_ulps")
        with right:
            chart(error_against_magnitude(shown_result, precision.dtype), key="check_precision_scatter")
        st.caption("Rounding puts an element within half an ULP of the truth; each further rounding adds about as much. A formula "
                   "that loses bits has its bars further right than the baseline's, and its points above them.")
        test = precision_test(case, formula, precision)
        tolerance = precision.results[0].tolerance if precision.results else None
        if test is not None and tolerance is not None:
            st.markdown(f"**Tolerances a test can use**: each input's `assert_close` below fails under 1 in "
                        f"{1 / tolerance.rate:,.0f} draws, fitted to {tolerance.draws} fresh draws of the case's inputs "
                        f"(a generalized Pareto tail of their largest errors, 95% confident), of which {tolerance.failures} failed.")
            st.code(test, language="python")
            st.download_button("Download the test", test, file_name=f"test_{file_name(case, formula).removeprefix('check_')}",
                               mime="text/x-python", key="check_precision_test", on_click="ignore")
        elif not precision.passed:
            needs = "; ".join(f"{r.name}: atol={r.baseline_tolerance.atol:.2g}, rtol={r.baseline_tolerance.rtol:.2g}"
                              for r in precision.results if r.baseline_tolerance is not None and r.baseline_tolerance.usable)
            st.caption(f"No tolerances are suggested for a gradient that fails the precision verdict: they would hide what it "
                       f"loses. {precision.baseline_words[0].upper() + precision.baseline_words[1:]} needs {needs or 'none'}.")


def provenance(case, formula, report) -> None:
    """Where the first NaN or Inf was born."""
    provenance = report.provenance
    st.subheader("Where the NaN or Inf was born")
    if provenance.born is None:
        st.caption(provenance.describe()[0].upper() + provenance.describe()[1:] + ".")
    for title, event in (("Born", provenance.born), ("Became NaN", provenance.became_nan)):
        if event is not None:
            st.error(f"**{title}** in {sentence(event.describe())}.", icon=":material/bug_report:")
    st.caption("Every aten operation of the formula's forward, backward and double backward, watched as it ran "
               "(a TorchDispatchMode): the first to make a non-finite value from finite inputs, and the first to make a NaN.")


def stage(case, formula, report, name: str) -> None:
    """Any other stage (does it train, …): its line and its curves."""
    result = report.stages[name]
    with st.expander(f"{stage_title(name)}: {result.outcome}", expanded=result.outcome != "pass"):
        words = result.describe()
        st.markdown(sentence(words[0].upper() + words[1:]) + ".")
        figure = stage_curves(result, stage_title(name))
        if figure is not None:
            chart(figure, key=f"stage_{name}")


STAGE_SECTIONS = {"conditions": conditions, "precision": precision, "provenance": provenance}  # the rest: ``stage``


def stages(case, formula, report) -> None:
    """A section of its own for each stage that has one (``STAGE_SECTIONS``), in the stages' order."""
    for name in report.stages:
        if name in STAGE_SECTIONS:
            STAGE_SECTIONS[name](case, formula, report)


def other_stages(case, formula, report) -> None:
    """Every other stage that ran (does it train, …): its line and its curves, under the maps."""
    for name in report.stages:
        if name not in OWN_LINES:  # second order on the card, determinism and parity opt-in, the rest in STAGE_SECTIONS
            stage(case, formula, report, name)


def determinism(case, formula, report) -> None:
    """The same gradient twice, and alone or in a batch: run on request."""
    if report.failure:
        return
    st.subheader("Determinism: the same gradient twice, and alone or in a batch")
    st.caption("The backward run again and again on the same inputs (no generator reseeded), bitwise; and a row's gradient "
               "alone, in this batch and among other rows. It costs a backward call per run, three per row, and, where the "
               "runs differ, PyTorch's gradcheck in slow mode to try the nondet_tol it suggests.")
    if st.toggle("Run the determinism check", False, key="check_determinism", bind=URL):
        runs = int(st.number_input("Runs of the backward", 2, 1000, 10, key="check_determinism_runs", bind=URL))
        found = compute(views.determinism, case, formula, runs, what=f"Running {formula}'s backward {runs} times…")
        if found is not None:
            outcome, line = determinism_line(found)
            st.markdown(f"{badge(outcome)} {line}.")
            varying = [s for s in found.spreads if s.varying.size]
            for spread in varying:
                chart(spread_map(spread, found.runs), key=f"check_determinism_{spread.name}")
            if found.batch is not None and found.batch.rows:
                st.dataframe([{"row": c.row, "input": c.input, "computed": c.where, "against its batch": c.outcome,
                               "largest difference": f"{c.difference:.3g}", "row's largest |gradient|": f"{c.scale:.3g}"}
                              for c in found.batch.rows], hide_index=True, width="stretch")


def parity(case, formula) -> None:
    """The same gradient however it is run: run on request (it compiles)."""
    st.subheader("Parity: compiled, under torch.func, twice differentiated")
    st.caption(f"The same truth and tolerances, with the formula run under torch.compile (aot_eager, inductor, fullgraph, "
               f"dynamic over two sizes), torch.func (grad, vjp, jvp, jacrev, jacfwd, vmap) and double backward, eager and "
               f"compiled. It compiles: about {views.parity_seconds(case):.0f} s the first time, then kept for the session.")
    if st.toggle("Run the parity grid", False, key="check_parity", bind=URL):
        grid = compute(views.parity, case, formula, what=f"Running {formula} compiled and under torch.func…")
        if grid is not None:
            line = parity_line(grid)
            st.markdown(f"{badge(line[0])} {line[1]}")
            rows = parity_rows(grid)
            chosen = st.dataframe(styled_parity(rows), hide_index=True, width="stretch", key="check_parity_table",
                                  on_select="rerun", selection_mode="single-row")
            picked = chosen.selection.rows if chosen is not None else []
            cell = grid.cells[picked[0]] if picked else next((c for c in grid.cells if c.differences), None)
            if cell is not None and cell.differences:
                index = st.radio("Error map of", range(len(cell.names)), format_func=lambda i: cell.names[i], horizontal=True,
                                 key="check_parity_entry") if len(cell.names) > 1 else 0
                chart(parity_error_map(cell, index), key="check_parity_map")
                st.caption(f"{cell.label}: {cell.finding}")
            else:
                st.caption("Click a row that differs to see its error map: this path's gradient minus the truth.")
            if grid.graph_breaks:
                st.markdown("**Graph breaks**: " + "; ".join(grid.graph_breaks))
            st.caption(f"Custom backward bypassed (the canary): {grid.canary}. {grid.compiler[0].upper() + grid.compiler[1:]}.")
            if grid.opcheck:
                st.markdown("**torch.library.opcheck** (schema, autograd registration, fake tensors, AOT dispatch; it checks "
                            "no numbers):")
                st.markdown("\n".join(f"- {badge('pass' if t.passed else 'fail')} {t.name}" + (f": {t.message}" if t.message else "")
                                      for t in grid.opcheck))


def diagnosis(report) -> None:
    """Why, not only where: where the verdict fails or a finding is named."""
    if not (report.diagnosis is not None and report.diagnosis.findings or not report.verdict.passed):
        return
    st.subheader("Diagnosis")
    if precision_failed(report):
        st.markdown(f"**Right as maths, poor in {report.precision.dtype}.** In float64 on the same values its backward passes "
                    f"on every Jacobian entry; in {report.precision.dtype} it loses more than PyTorch's own ops do (Precision, "
                    "above): look for an exp without its max subtracted, a difference of large nearly equal terms (E[x²] − E[x]²), "
                    "or a sum kept in the low dtype.")
    elif report.diagnosis is not None and report.diagnosis.findings:
        for finding in report.diagnosis.findings:
            st.markdown(f"**{finding.words[0].upper() + finding.words[1:]}.** {finding.evidence}.")
    else:
        st.markdown("No simple story explains this error: not a sign, a factor, a per-row factor, grad_output ignored, "
                    "reduced or permuted, a transposed Jacobian, swapped inputs, a missing rank-one term, a wrong "
                    "reduction dim or a region. The maps below show where it is.")
    scatter = diagnosis_scatter(report)
    if scatter is not None:
        chart(scatter, key="check_diagnosis")
        st.caption("A right backward lies on the green diagonal; a flipped sign on the red one; a constant factor "
                   "on a line of another slope; a factor that changes from row to row as a fan of lines, one per colour.")


def elements(report):
    """The three gradients and their errors, element by element; returns the comparison drawn."""
    st.subheader("Gradients and errors, element by element")
    left, scale_col, middle, right = st.columns(4)
    name = left.selectbox("Input", [c.name for c in report.inputs], key="check_input", bind=URL)
    scale = scale_col.radio(
        "Gradient colour scale", ["shared", "per panel"], key="check_scale", bind=URL, horizontal=True,
        help="Shared: equal colours mean equal values across the three maps, so a gradient 100× too large stands out. "
             "Per panel: each map gets its own range, so the true gradient's structure shows even beside a wrong one 100× larger.",
    )  # fmt: skip
    pair = middle.selectbox("Error map", PAIRS, key="check_pair", bind=URL, format_func=pair_name,
                            help="Which two gradient sources to subtract: a − b.")
    relative = right.toggle("Relative error |a − b| / |b| (log colour)", False, key="check_relative", bind=URL)
    comparison = report.input(name)
    drawn = drawable(comparison)
    if drawn.cut:
        st.info(drawn.describe(), icon=":material/content_cut:")
    chart(gradient_heatmaps(drawn.comparison, scale=scale), key="check_gradients")
    if report.failure and "analytic" in pair:
        st.info(f"The formula raised, so there is no analytic gradient to compare. Choose {pair_name(('reference', 'numerical'))} "
                "above to see how the finite differences agree with autograd.")
    else:
        chart(error_heatmap(drawn.comparison, pair, relative, report.tolerances), key="check_errors")
        st.subheader("Worst elements and the spread of errors")
        table, histogram = st.columns(2)
        with table:
            st.caption(f"The elements of {name} with the largest |{pair[0]} − {pair[1]}| (ten at most, NaN/Inf left out).")
            number = st.column_config.NumberColumn(format="%.4g")
            st.dataframe(worst_elements(comparison, pair), hide_index=True, width="stretch", key="check_worst",
                         column_config={column: number for column in ("analytic", "reference", "numerical", "abs error", "rel error")})
        with histogram:
            chart(error_histogram(report, pair), key="check_histogram")
    return comparison


def more_checks(case, formula, report, comparison) -> None:
    """The Jacobians, the step sweep, PyTorch's own checks and CPU against an accelerator, in tabs."""
    jacobians_tab, sweep_tab, conformance_tab, devices_tab = st.tabs(["Jacobians", "Step sweep", "PyTorch's checks", "CPU vs accelerator"])
    with jacobians_tab:
        if report is None:
            st.info("Nothing to show: the check above did not run.")
        else:
            figure = jacobian_heatmaps(comparison)
            if figure is not None:
                chart(figure, key="check_jacobians")
            elif report.failure:
                st.info("No Jacobians: the formula raised, so its backward cannot be read row by row.")
            else:
                size = comparison.plan.n_inputs * comparison.plan.n_outputs
                st.info(f"No Jacobians for {comparison.name}: {comparison.plan.n_outputs:,} outputs × {comparison.plan.n_inputs:,} inputs = "
                        f"{size:,} entries, above the limit of {DEFAULT_JACOBIAN_LIMIT:,} worth drawing. Choose a smaller shape to see them.")
    with sweep_tab:
        st.caption("Max |numerical − reference| for finite-difference steps from 1e-1 to 1e-12, in float32 and float64: "
                   "where truncation error gives way to rounding error, and which step is best. About 50 times the "
                   "finite differences above.")
        if st.toggle("Run the step sweep", False, key="check_sweep", bind=URL):
            sweep = compute(views.gradient_sweep, case, formula, what="Sweeping the finite-difference step…")
            if sweep is not None:
                chart(step_sweep_figure(sweep), key="check_sweep_figure")
                plateau = sweep.plateau()
                st.caption("**Taylor test** (dotted): the formula's own gradient against finite differences at each step. "
                           "A right backward follows the grey slope-2 line down until rounding takes over; a wrong one "
                           f"flattens out at the size of its bug. Here it gets down to {shown(plateau, '.2g')}"
                           + (", which is round-off: consistent with a right backward." if plateau < 1e-6 else
                              ", and no lower: the gradient is wrong by about that much." if math.isfinite(plateau) else "."))
    with conformance_tab:
        st.caption("PyTorch's own verdict on this Function: gradcheck (fast and slow), gradgradcheck (double backward), "
                   "forward-mode AD, vmap and more, each as pass, fail, not supported or skipped. Slow: gradcheck "
                   "loops over elements in Python.")
        if st.toggle("Run PyTorch's checks", False, key="check_conformance", bind=URL):
            checks = compute(views.conformance, case, formula, what="Running gradcheck and friends…")
            if checks is not None:
                chart(conformance_table(checks), key="check_conformance_table")
    with devices_tab:
        accelerators = views.accelerators()
        if not accelerators:
            reasons = " ".join(device_problem(kind) or "" for kind in ("cuda", "mps"))
            st.caption(f"No CUDA or MPS device is present to compare the CPU with. {reasons}")
        for device in accelerators:
            difference = compute(views.device_difference, case, formula, device, what=f"Checking on the CPU and on {device}…")
            if difference is not None:
                st.markdown(f"**CPU**: {difference.verdict_cpu}  \n**{device}**: {difference.verdict_device}")
                st.dataframe([{"input": k, f"max |CPU − {device}| (analytic)": v} for k, v in difference.max_difference.items()],
                             hide_index=True, width="stretch", key=f"check_device_{device}")


def downloads(case, formula, report) -> None:
    """The CSV, the JSON summary and the script that reproduces the check."""
    if report is not None:
        st.subheader("Downloads")
        csv_column, json_column = st.columns(2)
        with csv_column:  # built when clicked: a large case's CSV would slow every rerun
            download("Gradients and errors, one row per element (CSV)", lambda: element_rows(report, limit=2**31)[0],
                     f"gradients_{formula}.csv", key="check_download_csv")
        with json_column:
            download("Report summary (JSON)", summary(report, case), f"report_{formula}.json", key="check_download_json")

    st.subheader("Reproduce in Python")
    with guard("Writing the script"):
        small = math.prod(case.shape) * len(case.get_family().input_names) <= EMBEDDED_SHOWN
        snippet = python_snippet(case, formula, embed=small)
        st.caption("The same check as a standalone script: this case's inputs and upstream gradient are embedded in it, and "
                   "the formula is imported from the module that defines it; it needs nothing but torch and that module."
                   + ("" if small else " At this size the data is left out here and written into the download when you click it."))
        st.code(snippet, language="python", height=480)
        download("Download the script (.py)", snippet if small else (lambda: python_snippet(case, formula)), file_name(case, formula),
                 key="check_download_script")
