"""The reproduction script runs with nothing but torch and the formula's module, from anywhere, and
prints the engine's numbers (two scripts in their own process; the others in this one, as Python
runs a file, leaving nothing behind)."""

import contextlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import traceback

import numpy as np
import pytest
import torch

from gradient_lab.app import plugins
from gradient_lab.app.case import Case
from gradient_lab.app.views import compare_case
from gradient_lab.errors import LabError
from gradient_lab.app.family import declare, families
from gradient_lab.explore.perturb import Perturbation
from gradient_lab.present.reproduce import REPOSITORY, case_source, file_name, python_snippet
from tests.registry import families_kept, restore

EXAMPLE = REPOSITORY / "examples" / "my_functions.py"
FIXTURE = REPOSITORY / "tests" / "specimens" / "modules" / "plain_functions.py"
AS_SHIPPED = REPOSITORY / "tests" / "specimens" / "modules" / "as_shipped.py"  # a classmethod Function taking dim by position, and lambdas
AR, AN = ("analytic", "reference"), ("analytic", "numerical")
PERTURBED = Case(dtype="float32", seed=3, perturbation=Perturbation(noise1=0.3, norm2=2.0, align="parallel", align_angle=5.0))
SWISH = Case(family="swish", formulas=("swish", "forgot chain rule"), shape=(4, 6), dtype="float32", seed=1)
CUBE = Case(family="plain cube", formulas=("right", "scale forgotten"), shape=(3, 5), params=(("scale", 2.0),))
BUILTIN = {
    "tutorial": (Case(), "tutorial"),
    "perturbed float32": (PERTURBED, "tutorial"),
    "corrected": (Case(shape=(4, 6)), "corrected"),
    "raising": (Case(shape=(2, 3, 4)), "tutorial"),  # the tutorial's backward fails on 3-D inputs
    "cuda": (Case(shape=(4, 6), device="cuda"), "corrected"),  # on the CPU where there is no CUDA
}
USERS = {  # users' families: their reference is a lambda (swish) or importable (the plain cube)
    "swish": (SWISH, "swish"),
    "swish wrong": (SWISH, "forgot chain rule"),
    "cube": (CUBE, "right"),
    "cube wrong": (CUBE, "scale forgotten"),
    **{name: (Case(family="as shipped", formulas=(name,), shape=(3, 5)), name) for name in ("classmethod", "lambda", "lambda, no projection")},
}
CASES = {**BUILTIN, **USERS}


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    """The shipped example loaded from its path as the app does, and the plain cube declared from
    a copy of its module outside the repository, under a file name that is not a Python name;
    families declared here do not outlive this module's tests."""
    before = dict(families())
    assert plugins.load(str(EXAMPLE)).families == ("swish", "clamp", "row max", "cross entropy")
    assert plugins.load(str(AS_SHIPPED)).families == ("as shipped", "straight through", "softplus once")
    copy = tmp_path_factory.mktemp("user") / "plain-functions.py"
    shutil.copy(FIXTURE, copy)
    spec = importlib.util.spec_from_file_location("gradient_lab_user_plain_functions_test", copy)  # as gradient_lab.app.plugins names it
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    declare("plain cube", {"right": module.Cube, "scale forgotten": module.CubeScaleForgotten}, correct=("right",),
            reference=module.cube_reference, params={"scale": 1.0})
    yield copy
    restore(before)
    sys.modules.pop(spec.name, None)


@pytest.mark.parametrize("case", [Case(), PERTURBED, Case(shape=(2, 3, 4), params=(("dim", 2), ("eps", 1e-3)), step=1e-4, broadcast=True)])
def test_the_case_is_valid_python(case):
    scope = {"Case": Case, "Perturbation": Perturbation}
    assert eval(repr(case), scope) == case
    assert eval(case_source(case), scope) == case
    assert "Perturbation()" in case_source(Case())
    assert "noise1=0.3" in case_source(PERTURBED) and "noise2" not in case_source(PERTURBED)  # active fields only


def imports(snippet: str) -> list[str]:
    return [line.split("  #")[0] for line in snippet.splitlines() if re.match(r"(import |from \S+ import |\w+ = importlib)", line)]


def test_a_builtin_familys_script_imports_only_torch_and_the_formulas_module():
    snippet = python_snippet(PERTURBED, "sign+norm-fixed")
    compile(snippet, "snippet.py", "exec")
    assert imports(snippet) == ["import base64", "import io", "import sys", "import zlib", "import torch",
                                "from gradient_lab.app.functions.cosine import SignAndNormFixedFunction",
                                "from gradient_lab.app.functions.cosine import cosine_reference"]
    assert f"MODULE_DIR = {str(REPOSITORY)!r}" in snippet and "LAB_DIR" not in snippet
    assert "formula = 'sign+norm-fixed'" in snippet and "params = {'dim': 1, 'eps': 1e-08}" in snippet
    assert "torch.autograd.gradcheck(" in snippet and "fast_mode=False" in snippet and "raise_exception=False" in snippet
    assert file_name(PERTURBED, "sign+norm-fixed") == "check_cosine_sign_norm_fixed.py"


def test_a_users_script_imports_the_users_module_by_its_file_name(users):
    swish = python_snippet(SWISH, "swish")
    compile(swish, "swish.py", "exec")
    assert "from my_functions import Swish" in imports(swish)  # not the name gradient_lab.app.plugins loaded it under
    assert f"MODULE_DIR = {str(EXAMPLE.parent)!r}" in swish
    assert f"LAB_DIR = {str(REPOSITORY)!r}" in swish  # my_functions imports gradient_lab.app.family.declare
    assert "reference_function" not in swish and "central differences" in swish  # its reference is a lambda
    cube = python_snippet(CUBE, "right")
    assert imports(cube)[-3:] == ["import importlib", "Cube = importlib.import_module('plain-functions').Cube",
                                  "cube_reference = importlib.import_module('plain-functions').cube_reference"]
    assert f"MODULE_DIR = {str(users.parent)!r}" in cube and "LAB_DIR" not in cube  # it needs nothing of lib
    assert "params = {'scale': 2.0}" in cube


def test_an_unknown_or_unimportable_formula_is_said_in_words():
    with pytest.raises(LabError, match="no formula 'nope'"):
        python_snippet(Case(), "nope")
    with families_kept():
        declare("lambda only", {"double": lambda x: 2 * x})  # inside a function: no module's import declares it again
        with pytest.raises(LabError, match="cannot be imported by name, and its family is not declared at the top level"):
            python_snippet(Case(family="lambda only", formulas=("double",)), "double")


def test_a_lambda_is_taken_from_its_family_and_a_classmethods_params_passed_by_position(users):
    lambda_script = python_snippet(Case(family="as shipped", formulas=("lambda",)), "lambda")
    assert "get_family('as shipped').formulas['lambda'].function(*xs, **params)" in lambda_script
    assert "RowSoftmax.apply(*xs, params['dim'])" in python_snippet(Case(family="as shipped", formulas=("classmethod",)), "classmethod")


STANDALONE = ("tutorial", "swish")  # run by a python of their own; the other scripts in this process
IN_PROCESS: dict[str, dict] = {}  # by script path: what a script run in this process changed here, and was undone
BEFORE: dict[str, set] = {}  # sys.path and sys.modules before the first of them ran


def run_in_process(script, cwd) -> subprocess.CompletedProcess:
    """``script`` run in this process from ``cwd`` as Python runs a file (as ``__main__``), what it
    prints captured: a raise is exit status 1 with its traceback on stderr. What it changes here is
    undone and noted in IN_PROCESS: sys.path, the modules it imported that were not here (a new
    top-level name, the formula's module; libraries' lazy submodules stay) and the families a
    user's module declares on import."""
    path, top_level = list(sys.path), {name.partition(".")[0] for name in sys.modules}
    out, err, status = io.StringIO(), io.StringIO(), 0
    with families_kept() as before:
        try:
            with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                exec(compile(script.read_text(), str(script), "exec"), {"__name__": "__main__", "__file__": str(script)})  # noqa: S102 - the script, as python runs it
        except SystemExit as exited:
            status = exited.code if isinstance(exited.code, int) else 1
        except BaseException:  # noqa: BLE001 - as Python: the traceback on stderr, status 1
            traceback.print_exc(file=err)
            status = 1
        finally:
            added = [p for p in sys.path if p not in path]
            imported = [name for name in sys.modules if name.partition(".")[0] not in top_level]
            declared = [name for name, family in families().items() if before.get(name) is not family]
            sys.path[:] = path
            for name in imported:
                del sys.modules[name]
    IN_PROCESS[str(script)] = {"sys.path": added, "modules": imported, "families": declared}
    return subprocess.CompletedProcess([sys.executable, str(script)], status, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def runs(tmp_path_factory, users):
    """Every script written to its own folder and run from yet another folder: a built-in family's
    with its recorded MODULE_DIR made useless (the module is found where Python finds it: only the
    repository on PYTHONPATH, in a process of its own), a user's by the script's own MODULE_DIR
    and LAB_DIR (no PYTHONPATH at all, in a process of its own). The STANDALONE ones run at once,
    in parallel with the others run in this process. (case, formula, completed process) by name."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    scripts, started, results = {}, {}, {}
    for name, (case, formula) in CASES.items():
        snippet = python_snippet(case, formula)
        script_env = env
        if name in BUILTIN:
            snippet = snippet.replace(f"MODULE_DIR = {str(REPOSITORY)!r}", "MODULE_DIR = '/nonexistent/gradient-lab'")
            script_env = {**env, "PYTHONPATH": str(REPOSITORY)}
        script = tmp_path_factory.mktemp("script") / file_name(case, formula)
        script.write_text(snippet)
        scripts[name] = script
        if name in STANDALONE:
            started[name] = subprocess.Popen([sys.executable, str(script)], cwd=elsewhere, env=script_env, text=True,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    BEFORE.update({"sys.path": set(sys.path), "modules": set(sys.modules)})
    for name, script in scripts.items():
        if name not in STANDALONE:
            results[name] = (*CASES[name], run_in_process(script, elsewhere))
    for name, process in started.items():
        out, err = process.communicate(timeout=120)
        results[name] = (*CASES[name], subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return results


def test_the_scripts_run_in_this_process_leave_nothing_behind(runs, users):
    """They did change this process while they ran (a user's script puts its MODULE_DIR on
    sys.path and imports the user's module, which may declare families), and all of it was undone.
    (Where an earlier test left the example's folder on sys.path and its module imported, the
    swish script finds them there and changes neither.)"""
    changes = {name: IN_PROCESS.get(run.args[1]) for name, (_, _, run) in runs.items()}
    assert sorted(name for name, changed in changes.items() if changed is not None) == sorted(set(CASES) - set(STANDALONE))
    cube, swish = changes["cube"], changes["swish wrong"]
    assert cube["sys.path"] == [str(users.parent)] and cube["modules"] == ["plain-functions"] and cube["families"] == []
    fresh = "my_functions" not in BEFORE["modules"]
    assert swish["sys.path"] == [str(EXAMPLE.parent)] * (str(EXAMPLE.parent) not in BEFORE["sys.path"])
    assert swish["modules"] == ["my_functions"] * fresh and ("swish" in swish["families"]) == fresh
    assert changes["tutorial"] is None and changes["corrected"]["sys.path"] == ["/nonexistent/gradient-lab"]
    for changed in IN_PROCESS.values():
        assert not set(changed["sys.path"]) & set(sys.path) and not set(changed["modules"]) & set(sys.modules)


def printed(out: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)}\s*[:=]\s*(\S+)$", out, re.MULTILINE)
    assert match, f"{label!r} not printed in:\n{out}"
    return match.group(1)


@pytest.mark.parametrize("name", ["tutorial", "perturbed float32", "corrected", "cuda", "cube", "cube wrong"])
def test_the_script_prints_the_engines_numbers(runs, name):
    case, formula, run = runs[name]
    assert run.returncode == 0, run.stderr
    report = compare_case(case if name != "cuda" or torch.cuda.is_available() else Case(shape=(4, 6)), formula)
    for c in report.inputs:
        assert float(printed(run.stdout, f"{c.name}: max |analytic - reference|")) == pytest.approx(c.errors[AR].max_abs, rel=1e-9)
    assert float(printed(run.stdout, "cosine(analytic, reference)")) == pytest.approx(report.cosine, rel=1e-9, abs=1e-12)
    assert float(printed(run.stdout, "max |formula output - reference output|")) == pytest.approx(report.forward_max_error, rel=1e-9)
    assert f"torch.{case.dtype}" in run.stdout  # the inputs in the case's dtype
    # gradcheck in float64 agrees with the engine's verdict on these cases
    assert printed(run.stdout, "gradcheck (float64, fast_mode=False)") == str(report.verdict.passed)


@pytest.mark.parametrize("name", ["swish", "swish wrong"])
def test_without_an_importable_reference_the_script_compares_with_the_engines_finite_differences(runs, name):
    case, formula, run = runs[name]
    assert run.returncode == 0, run.stderr
    report = compare_case(case, formula)
    (c,) = report.inputs
    assert float(printed(run.stdout, "x: max |analytic - numerical|")) == pytest.approx(c.errors[AN].max_abs, rel=1e-9)
    a, n = c.gradients["analytic"].ravel(), c.gradients["numerical"].ravel()
    cosine = a @ n / (np.linalg.norm(a) * np.linalg.norm(n))
    assert float(printed(run.stdout, "cosine(analytic, numerical)")) == pytest.approx(cosine, rel=1e-9)
    assert "x: shape (4, 6), torch.float32, cpu" in run.stdout
    assert printed(run.stdout, "gradcheck (float64, fast_mode=False)") == str(report.verdict.passed) == str(formula == "swish")


@pytest.mark.parametrize("name", ["classmethod", "lambda", "lambda, no projection"])
def test_functions_as_shipped_reproduce_the_engines_numbers(runs, name):
    """A classmethod Function given dim by position, and lambdas taken from their family's module."""
    case, formula, run = runs[name]
    assert run.returncode == 0, run.stderr
    report = compare_case(case, formula)
    (c,) = report.inputs
    assert float(printed(run.stdout, "X: max |analytic - numerical|")) == pytest.approx(c.errors[AN].max_abs, rel=1e-6, abs=1e-12)
    assert printed(run.stdout, "gradcheck (float64, fast_mode=False)") == str(report.verdict.passed) == str(formula != "lambda, no projection")


def test_the_tutorial_is_flipped_and_the_corrected_formula_is_exact(runs):
    assert float(printed(runs["tutorial"][2].stdout, "cosine(analytic, reference)")) < 0
    corrected = runs["corrected"][2].stdout
    assert float(printed(corrected, "cosine(analytic, reference)")) == pytest.approx(1.0, abs=1e-12)
    assert printed(corrected, "gradcheck (float64, fast_mode=False)") == "True"


def test_an_unusable_device_is_said_and_the_check_runs_on_the_cpu(runs):
    run = runs["cuda"][2]
    assert ("device 'cuda' is not available here" in run.stdout) == (not torch.cuda.is_available())
    assert "x1: shape (4, 6), torch.float64, " + ("cuda:0" if torch.cuda.is_available() else "cpu") in run.stdout
    snippet = python_snippet(Case(shape=(4, 6), device="cuda"), "corrected")
    assert "DEVICE = 'cuda'" in snippet and "device='cuda'," in snippet


def test_a_backward_that_raises_stops_the_script_with_the_same_error(runs):
    case, formula, run = runs["raising"]
    report = compare_case(case, formula)
    assert report.failure and run.returncode != 0
    assert report.failure.message in run.stderr  # e.g. "The size of tensor a (4) must match ..."


def test_the_precision_test_passes_as_pytest_on_fresh_seeds_and_none_is_offered_for_a_poor_formula(tmp_path):
    from gradient_lab.present.reproduce import precision_test

    case = Case(family="softmax", formulas=("corrected",), dtype="bfloat16")
    report = compare_case(case, "corrected")
    text = precision_test(case, "corrected", report.precision)
    atol = report.precision.results[0].tolerance.atol
    assert f"'x': ({atol!r}, 0.016)" in text and "1 in 10,000" in text
    path = tmp_path / "test_softmax_bf16.py"
    path.write_text(text)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and "100 passed" in run.stdout, run.stdout + run.stderr
    poor = Case(family="softmax", formulas=("no-subtract",), dtype="bfloat16")
    assert precision_test(poor, "no-subtract", compare_case(poor, "no-subtract").precision) is None
    assert precision_test(Case(), "corrected", None) is None
