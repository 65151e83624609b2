"""Results in a notebook (lib.present.notebook): a report shows as its verdict card in self-contained
HTML (badge, headline, numbers, the card's SVG; no script, no address) and as one line in a console;
the parity, precision and determinism results name their outcome; the example notebook runs in a
kernel of this environment and shows its reports as cards."""

import os
import sys
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from gradient_lab.engine.report import Parity, ParityCell
from gradient_lab.present.cards import card
from gradient_lab.testing import check_gradients
from tests.specimens.zoo import Square, WrongSquare

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "check_a_function.ipynb"


def _x(dtype=torch.float64):
    return torch.randn(4, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(dtype)


def _report(function, **options):
    return check_gradients(function.apply, _x(), reference=lambda x: x * x, order=1, conditions="none", **options)


def _self_contained(page: str) -> None:
    assert "<script" not in page.lower() and "http" not in page.lower() and "plotly" not in page.lower()


@pytest.mark.parametrize("function, outcome, lead", [(Square, "pass", "passes"), (WrongSquare, "fail", "fails")])
def test_a_report_shows_as_its_card_in_a_notebook_and_as_its_verdict_in_one_line(function, outcome, lead):
    report = _report(function)
    shown = card(report)
    page = report._repr_html_()
    assert report.verdict.outcome == outcome and shown.outcome == outcome
    assert f"{outcome}</span>" in page  # the verdict's badge
    assert shown.headline in page and function.__name__ in page
    assert all(number.value in page for number in shown.numbers)
    assert "<svg" in page  # the card's picture, inline
    _self_contained(page)
    line = repr(report)
    assert "\n" not in line and line.startswith(f"<GradientReport {function.__name__} float64: {lead} — ")
    assert shown.headline in line and str(report) == line


def test_text_from_the_code_under_test_is_escaped():
    report = _report(Square)
    page = replace(report, formula="<b>x</b>")._repr_html_()
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page


def test_the_parity_precision_and_determinism_results_name_their_outcome():
    cell = lambda key, outcome, **kw: ParityCell(key, "torch.compile", key, outcome, **kw)  # noqa: E731
    parted = Parity((cell("eager", "agrees"), cell("aot_eager", "differs", finding="the gradient at x[1] is 2", worst="x[1]")),
                    "autograd.Function")
    assert "fail</span>" in parted._repr_html_() and "differs under aot_eager" in parted._repr_html_()
    assert repr(parted).startswith("<Parity: fail — ") and "\n" not in repr(parted)

    precision = check_gradients(Square.apply, _x(torch.bfloat16), order=1, conditions="none").precision
    assert precision.passed and "pass</span>" in precision._repr_html_() and "bfloat16" in precision._repr_html_()
    assert repr(precision).startswith("<Precision bfloat16: pass — ")

    determinism = _report(Square, determinism=3).determinism
    assert not determinism.flagged and "pass</span>" in determinism._repr_html_() and "3 runs" in determinism._repr_html_()
    assert repr(determinism).startswith("<Determinism: pass — ")
    for result in (parted, precision, determinism):
        _self_contained(result._repr_html_())


def test_the_example_notebook_runs_and_shows_each_report_as_its_card(monkeypatch):
    # the kernelspec ipykernel installs in this environment first, so the kernel is this Python
    monkeypatch.setenv("JUPYTER_PATH", os.path.join(sys.prefix, "share", "jupyter"))
    notebook = nbformat.read(EXAMPLE, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable)", id="which-python"))
    # run from the checkout's root: `import gradient_lab` finds this checkout
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    cells = {cell.id: cell for cell in notebook.cells}
    assert cells["which-python"].outputs[0]["text"].strip() == sys.executable
    for name, outcome in (("right-report", "pass"), ("buggy-report", "fail")):
        (output,) = cells[name].outputs
        page = output["data"]["text/html"]
        assert f"{outcome}</span>" in page and "<svg" in page
        _self_contained(page)
    assert cells["one-line"].outputs[0]["text"].startswith("<GradientReport SquareMissingTwo float64: fails — ")
