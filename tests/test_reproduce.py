"""The reproduction script runs on its own, from anywhere, and prints the engine's numbers."""

import os
import re
import subprocess
import sys

import pytest

from lib.case import Case
from lib.compare import compare_case
from lib.errors import LabError
from lib.perturb import Perturbation
from lib.reproduce import REPOSITORY, case_source, file_name, python_snippet

AR = ("analytic", "reference")
PERTURBED = Case(dtype="float32", seed=3, perturbation=Perturbation(noise1=0.3, norm2=2.0, align="parallel", align_angle=5.0))
CASES = {
    "tutorial": (Case(), "tutorial"),
    "perturbed float32": (PERTURBED, "tutorial"),
    "corrected": (Case(shape=(4, 6)), "corrected"),
    "raising": (Case(shape=(2, 3, 4)), "tutorial"),  # the tutorial's backward fails on 3-D inputs
}


@pytest.mark.parametrize("case", [Case(), PERTURBED, Case(shape=(2, 3, 4), params=(("dim", 2), ("eps", 1e-3)), step=1e-4, broadcast=True)])
def test_the_case_is_valid_python(case):
    scope = {"Case": Case, "Perturbation": Perturbation}
    assert eval(repr(case), scope) == case
    assert eval(case_source(case), scope) == case
    assert "Perturbation()" in case_source(Case())
    assert "noise1=0.3" in case_source(PERTURBED) and "noise2" not in case_source(PERTURBED)  # active fields only


def test_the_script_names_its_repository_and_compiles():
    snippet = python_snippet(PERTURBED, "sign+norm-fixed")
    compile(snippet, "snippet.py", "exec")
    assert repr(str(REPOSITORY)) in snippet and (REPOSITORY / "lib" / "reproduce.py").exists()
    assert "torch.autograd.gradcheck(" in snippet and "fast_mode=True" in snippet and "raise_exception=False" in snippet
    assert file_name(PERTURBED, "sign+norm-fixed") == "check_cosine_sign_norm_fixed.py"


def test_an_unknown_formula_is_said_in_words():
    with pytest.raises(LabError, match="no formula 'nope'"):
        python_snippet(Case(), "nope")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every script written to its own folder and run at once, from yet another folder, with no
    PYTHONPATH: (case, formula, completed process) by name."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = {}
    for name, (case, formula) in CASES.items():
        script = tmp_path_factory.mktemp("script") / file_name(case, formula)
        script.write_text(python_snippet(case, formula))
        started[name] = subprocess.Popen([sys.executable, str(script)], cwd=elsewhere, env=env, text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = {}
    for name, process in started.items():
        out, err = process.communicate(timeout=120)
        results[name] = (*CASES[name], subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return results


def printed(out: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)}\s*[:=]\s*(\S+)$", out, re.MULTILINE)
    assert match, f"{label!r} not printed in:\n{out}"
    return match.group(1)


@pytest.mark.parametrize("name", ["tutorial", "perturbed float32", "corrected"])
def test_the_script_prints_the_engines_numbers(runs, name):
    case, formula, run = runs[name]
    assert run.returncode == 0, run.stderr
    report = compare_case(case, formula)
    for c in report.inputs:
        assert float(printed(run.stdout, f"{c.name}: max |analytic - reference|")) == pytest.approx(c.errors[AR].max_abs, rel=1e-9)
    assert float(printed(run.stdout, "cosine(analytic, reference)")) == pytest.approx(report.cosine, rel=1e-9, abs=1e-12)
    assert float(printed(run.stdout, "loss (reference forward)")) == pytest.approx(report.loss, rel=1e-12)
    assert f"torch.{case.dtype}" in run.stdout  # the inputs in the case's dtype
    # gradcheck in float64 agrees with the engine's verdict on these cases
    assert printed(run.stdout, "gradcheck (float64, fast_mode=True)") == str(report.verdict.passed)


def test_the_tutorial_is_flipped_and_the_corrected_formula_is_exact(runs):
    assert float(printed(runs["tutorial"][2].stdout, "cosine(analytic, reference)")) < 0
    corrected = runs["corrected"][2].stdout
    assert float(printed(corrected, "cosine(analytic, reference)")) == pytest.approx(1.0, abs=1e-12)
    assert printed(corrected, "gradcheck (float64, fast_mode=True)") == "True"


def test_a_backward_that_raises_stops_the_script_with_the_same_error(runs):
    case, formula, run = runs["raising"]
    report = compare_case(case, formula)
    assert report.failure and run.returncode != 0
    assert report.failure.split(": ", 2)[-1] in run.stderr  # e.g. "The size of tensor a (4) must match ..."
