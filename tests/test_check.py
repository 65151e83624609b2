"""The command line: the right exit status for a module whose formulas are as declared (in a
subprocess, as CI runs it), one whose correct formula is broken, one that fails to import, and
arguments that are wrong (in this process, through ``cli.main``), and its three formats."""

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from gradient_lab import cli
from gradient_lab.app.family import families
from gradient_lab.engine.finding import KINDS
from tests.registry import families_kept

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "my_functions.py")
BROKEN = str(ROOT / "tests" / "specimens" / "modules" / "broken_correct.py")


@pytest.fixture(autouse=True)
def isolated():
    """What ``cli.main`` loads in this process does not outlive a test: the families it declares
    and the users' modules gradient_lab.app.plugins put in sys.modules (a failed import's too)."""
    modules = set(sys.modules)
    with families_kept():
        yield
    for name in set(sys.modules) - modules:
        if name.startswith("gradient_lab_user_"):
            del sys.modules[name]


def test_a_module_whose_formulas_are_as_declared_exits_0_with_a_table_that_fits_100_columns():
    """The one end-to-end run: ``python -m lib.check`` in its own process, as CI calls it."""
    done = subprocess.run([sys.executable, "-m", "lib.check", EXAMPLE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= cli.WIDTH for line in lines)
    assert any(line.startswith("swish / swish ") and " ok " in line for line in lines)
    assert any(line.startswith("clamp / leaks outside ") and " caught " in line for line in lines)
    assert "why: wrong only where 1 < |x| ≤ 2" in done.stdout


def test_a_broken_correct_formula_exits_1_and_names_its_bug(capsys):
    assert cli.main(["check", BROKEN]) == 1
    out = capsys.readouterr().out
    assert "FAILED square / square (declared correct)" in out
    assert "off by a constant factor 0.5" in out


def test_a_module_that_fails_to_import_exits_2_with_the_loaders_message(capsys):
    assert cli.main(["check", str(ROOT / "tests" / "specimens" / "modules" / "broken_import.py")]) == 2
    done = capsys.readouterr()
    assert not done.out and done.err.startswith("gradient lab: cannot check ")
    assert "ImportError: this module needs a package that is not installed (broken_import.py, line 3)" in done.err


def test_an_unknown_family_is_refused_with_exit_2_and_the_families_declared(capsys):
    assert cli.main(["check", EXAMPLE, "--family", "nope"]) == 2
    done = capsys.readouterr()
    assert not done.out and "declares no family 'nope'" in done.err and "swish" in done.err


@pytest.mark.parametrize("args, said", [
    ([EXAMPLE, "--shape", "8,x"], "argument --shape: a shape is sizes separated by commas"),
    ([EXAMPLE, "--shape", "8,0"], "argument --shape: every size must be at least 1"),
    ([EXAMPLE, "--dtype", "float8"], "argument --dtype"),
    ([EXAMPLE, "--format", "yaml"], "argument --format"),
    ([], "source"),  # no module named
])
def test_wrong_arguments_exit_2_in_words_before_anything_is_loaded(capsys, args, said):
    before = families()
    with pytest.raises(SystemExit) as exited:
        cli.main(["check", *args])
    assert exited.value.code == 2 and families().keys() == before.keys()
    done = capsys.readouterr()
    assert not done.out and "error: " in done.err and said in done.err


def test_json_is_for_machines(capsys):
    assert cli.main(["check", BROKEN, "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["exit_status"] == 1
    (formula,) = data["formulas"]
    report = formula["report"]  # the schema of the pages' download
    assert formula["status"] == "FAILED" and formula["declared"] == "correct" and report["second order"]["outcome"] == "fail"
    assert [f["kind"] for f in report["diagnosis"]] == ["factor"] and "0.5" in report["diagnosis"][0]["words"]
    assert report["coverage"]["compared one by one"] == report["coverage"]["structurally nonzero"] > 0
    assert report["outcome"] == "fail" and report["failure"] is None and report["signature"]["inputs"][0]["differentiated"]


def test_junit_has_one_test_case_per_formula_and_fails_only_the_broken_correct_one(capsys):
    assert cli.main(["check", EXAMPLE, "--format", "junit"]) == 0
    suite = ElementTree.fromstring(capsys.readouterr().out).find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase") if not c.get("name").startswith("when ")}
    assert set(cases) == {"swish", "forgot chain rule", "clamp", "leaks outside", "row max", "to first element", "cross entropy",
                          "forgot the target"} and suite.get("failures") == "0"
    conditions = [c for c in suite.iter("testcase") if c.get("name").startswith("when ")]  # and one per condition of each
    assert {c.get("classname") for c in conditions} >= {"gradient_lab.swish.swish", "gradient_lab.row max.row max"}
    assert int(suite.get("tests")) == len(cases) + len(conditions)
    assert cli.main(["check", BROKEN, "--format", "junit"]) == 1
    suite = ElementTree.fromstring(capsys.readouterr().out).find("testsuite")
    failure = suite.find("testcase").find("failure")
    assert suite.get("failures") == "1" and "constant factor 0.5" in failure.get("message")


def test_a_buggy_formula_that_passes_is_a_warning_not_a_failure(capsys):
    results = cli.check_module(EXAMPLE, family="swish")
    right, wrong = results
    passing_bug = cli.FormulaResult(wrong.family, wrong.formula, False, "pass", "passes", second_order="pass")
    assert cli.exit_status([right, passing_bug]) == 0 and passing_bug.status == "warning"
    assert "buggy but passing" in cli.text_table([right, passing_bug])
    xml = ElementTree.fromstring(cli.junit_xml([right, passing_bug]))
    assert xml.find("testsuite").get("skipped") == "1"


def test_progress_goes_to_stderr_only_after_a_second(capsys):
    cli.Progress(after=60).say("quick")
    cli.Progress(after=0).say("slow")
    err = capsys.readouterr().err
    assert "quick" not in err and "slow" in err


def test_a_broken_function_contract_is_named_and_fails_a_correct_formula(capsys):
    contract = str(ROOT / "tests" / "specimens" / "modules" / "contract_breakers.py")
    assert cli.main(["check", contract, "--format", "json", "--shape", "3,4"]) == 0  # the one declared correct keeps the contract
    by_name = {f["formula"]: f for f in json.loads(capsys.readouterr().out)["formulas"]}
    assert by_name["good"]["contract"] == [] and by_name["good"]["status"] == "ok"
    assert any("save_for_backward" in c and "ctx.y" in c for c in by_name["tensor on ctx"]["contract"])
    kept_on_ctx = cli.FormulaResult("f", "g", True, "pass", "passes", second_order="pass", contract=["tensors are saved …: ctx.y"])
    assert kept_on_ctx.status == "FAILED" and "contract: tensors are saved" in cli.text_table([kept_on_ctx])


AS_SHIPPED = str(ROOT / "tests" / "specimens" / "modules" / "as_shipped.py")


def test_functions_as_shipped_pass_as_declared_and_the_json_says_which_truth_and_why(capsys):
    """A classmethod Function given dim by position, a straight-through estimator judged against
    its declared surrogate, and a once-differentiable softplus: no false alarm, the bugs caught."""
    assert cli.main(["check", AS_SHIPPED, "--shape", "4,8", "--format", "json"]) == 0, capsys.readouterr().err
    formulas = {(f["family"], f["formula"]): f for f in json.loads(capsys.readouterr().out)["formulas"]}
    assert {name: f["status"] for name, f in formulas.items()} == {
        ("as shipped", "classmethod"): "ok", ("as shipped", "lambda"): "ok", ("as shipped", "lambda, no projection"): "caught",
        ("straight through", "ste"): "ok", ("straight through", "ste doubled"): "caught", ("softplus once", "once"): "ok"}
    ste = formulas[("straight through", "ste")]["report"]
    assert ste["coverage"]["reference role"] == "surrogate" and ste["coverage"]["truths"] == ["reference"]
    assert formulas[("softplus once", "once")]["report"]["second order"] == {
        "outcome": "by design", "failed": False, "verdict": formulas[("softplus once", "once")]["report"]["second order"]["verdict"]}
    assert formulas[("as shipped", "classmethod")]["contract"] == []  # a classmethod is no contract error


def test_order_1_leaves_the_second_order_unchecked(capsys):
    assert cli.main(["check", BROKEN, "--order", "1", "--format", "json"]) == 1  # its first order is wrong too
    (formula,) = json.loads(capsys.readouterr().out)["formulas"]
    assert formula["report"]["second order"]["outcome"] == "not checked" and "order=1" in formula["report"]["second order"]["verdict"]


PARITY_OPS = str(ROOT / "tests" / "specimens" / "modules" / "parity_ops.py")


def test_parity_gives_each_formula_its_grid_in_json_junit_and_text(capsys):
    args = ["check", PARITY_OPS, "--shape", "4,3", "--conditions", "none", "--parity", "eager,aot_eager,grad"]
    assert cli.main([*args, "--format", "json"]) == 0  # the correct ones agree; the buggy ones are caught
    data = json.loads(capsys.readouterr().out)
    grids = {(f["family"], f["formula"]): f["parity"] for f in data["formulas"]}
    assert all([c["path"] for c in g["cells"]] == ["eager", "aot_eager", "grad"] for g in grids.values())
    outcome = {k: {c["path"]: c["outcome"] for c in g["cells"]} for k, g in grids.items()}
    assert outcome[("parity sine", "fallback under compile")] == {"eager": "agrees", "aot_eager": "differs", "grad": "agrees"}
    assert outcome[("parity sine", "custom op")] == {"eager": "agrees", "aot_eager": "agrees", "grad": "not supported"}
    assert outcome[("parity cube", "custom op")]["eager"] == "differs"
    assert [t["passed"] for t in grids[("parity cube", "custom op")]["opcheck"]] == [True] * 4
    assert grids[("parity sine", "custom op")]["kind"] == "custom op"

    assert cli.main([*args, "--format", "junit", "--family", "parity sine"]) == 0
    suite = ElementTree.fromstring(capsys.readouterr().out).find("testsuite")
    cells = [c for c in suite.iter("testcase") if c.get("classname").endswith(".parity")]
    assert len(cells) == 9 and {c.get("classname") for c in cells} >= {"gradient_lab.parity sine.fallback under compile.parity"}
    compiled = next(c for c in cells if c.get("classname").startswith("gradient_lab.parity sine.fallback")
                    and c.get("name") == "torch.compile (aot_eager)")
    assert compiled.find("failure") is None  # declared buggy: its difference is the finding, not a failure
    assert cli.main([*args, "--family", "parity sine"]) == 0
    text = capsys.readouterr().out
    assert "parity: agrees in 2 of 3 ways of running it; differs under torch.compile (aot_eager)" in text


def test_a_correct_formula_that_differs_under_one_path_fails_the_check(capsys, tmp_path):
    module = tmp_path / "fallback.py"
    module.write_text("import torch\nfrom gradient_lab import declare\nfrom tests.specimens import parity as zoo\n"
                      "declare('fallback', {'sine': zoo.FallbackUnderCompile}, reference=torch.sin, correct=('sine',), order=1)\n")
    assert cli.main(["check", str(module), "--shape", "4,3", "--conditions", "none", "--parity", "aot_eager"]) == 1
    assert "differs under torch.compile (aot_eager): the gradient at x[" in capsys.readouterr().out
    assert cli.main(["check", str(module), "--parity", "jit"]) == 2
    assert "unknown parity path 'jit'" in capsys.readouterr().err


PRECISION = str(ROOT / "tests" / "specimens" / "modules" / "precision_functions.py")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_dtype_below_float64_gives_each_formula_its_precision_verdict_in_json_text_and_html(capsys, tmp_path, dtype):
    args = ["check", PRECISION, "--family", "precision softmax", "--dtype", dtype, "--conditions", "none"]
    assert cli.main([*args, "--format", "json"]) == 0  # the shifted one passes, the unshifted one is caught
    data = json.loads(capsys.readouterr().out)
    precision = {f["formula"]: f["report"]["precision"] for f in data["formulas"]}
    assert {f["formula"]: f["status"] for f in data["formulas"]} == {"shifted": "ok", "unshifted exp": "caught"}
    right, poor = precision["shifted"], precision["unshifted exp"]
    assert right["dtype"] == dtype and right["passed"] and right["ratio"] <= 3 and right["k"] == 2.0
    x = right["inputs"][0]
    assert x["suggested tolerances"]["atol"] > 0 and x["suggested tolerances"]["rate"] == 1e-4 and x["formula"]["SNR dB"] > 20
    assert sum(x["formula"]["ULP histogram"]) == x["compared"] and len(right["ULP bins"]) == len(x["formula"]["ULP histogram"]) + 1
    assert not poor["passed"] and poor["inputs"][0]["formula"]["non-finite"] > 0
    report = tmp_path / "report.html"
    assert cli.main([*args, "--report", str(report)]) == 0
    text = capsys.readouterr().out
    assert f"precision: in {dtype}, x's largest error is" in text and "tolerances for x: assert_close(atol=" in text
    assert f"why: in {dtype}, the gradient of x is not finite" in text
    page = report.read_text()
    assert page.count(f"distance from the float64 truth, in {dtype} ULPs") >= 2 and "Precision:" in page  # both formulas' histograms


def test_a_numerically_poor_formula_declared_correct_fails_the_check(capsys, tmp_path):
    module = tmp_path / "poor.py"
    module.write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'tests' / 'specimens' / 'modules')!r})\n"
                      "from gradient_lab import declare\nimport precision_functions as pf\n"
                      "declare('poor cumsum', {'carry in dtype': pf.LowCarryCumsum}, reference=lambda x: x.cumsum(-1),"
                      " correct=('carry in dtype',), loss=pf._weighted)\n")
    args = ["check", str(module), "--family", "poor cumsum", "--shape", "2,512", "--conditions", "none", "--dtype", "float16"]
    assert cli.main(args) == 1
    assert "FAILED poor cumsum / carry in dtype" in capsys.readouterr().out


DETERMINISM = str(ROOT / "tests" / "specimens" / "modules" / "determinism_functions.py")


def test_determinism_gives_each_formula_its_line_and_json(capsys):
    args = ["check", DETERMINISM, "--conditions", "none", "--determinism"]
    assert cli.main([*args, "--format", "json"]) == 0  # findings, not gradient errors: the verdicts pass
    data = json.loads(capsys.readouterr().out)
    found = {(f["family"], f["formula"]): f["determinism"] for f in data["formulas"]}
    shuffled = found[("repeat scaled", "shuffled accumulation")]
    assert not shuffled["deterministic"] and shuffled["runs"] == 10 and shuffled["gradcheck passes with it"] is True
    assert shuffled["nondet_tol"] > 0 and shuffled["inputs"][0]["varying"] > 0
    assert found[("repeat scaled", "deterministic")]["deterministic"]
    assert found[("repeat batch centred", "centred")]["batch"]["outcome"] == "different"
    assert found[("repeat batch norm", "centred")]["batch"]["outcome"] == "declared"
    assert cli.main([*args, "--family", "repeat batch centred", "--determinism", "12"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "determinism: deterministic: 12 runs of the backward bitwise equal; batch: the gradient of rows 0 and 7 changes" in text


def test_a_gradient_that_is_not_finite_says_where_it_was_born_in_text_and_json(capsys, tmp_path):
    module = tmp_path / "nan.py"
    module.write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'tests' / 'specimens' / 'modules')!r})\n"
                      "import torch\nfrom gradient_lab import declare\nimport nan_functions as nf\n"
                      "declare('over zero', {'divides': nf.OverZero}, reference=lambda x: x * 1.0, correct=('divides',),"
                      " build_inputs=lambda shape, **_: (nf.inputs_for('OverZero'),))\n")
    args = ["check", str(module), "--conditions", "none"]
    assert cli.main([*args, "--format", "json"]) == 1
    born = json.loads(capsys.readouterr().out)["formulas"][0]["report"]["provenance"]["born"]
    assert born["op"] == "aten.div" and born["cause"] == "x/0" and born["line"].startswith("nan_functions.py:") and born["fix"]
    assert cli.main(args) == 1
    assert "not finite: born in aten.div in backward at nan_functions.py:" in " ".join(capsys.readouterr().out.split())


def test_each_formula_says_whether_it_trains_in_text_json_and_html(capsys, tmp_path):
    with families_kept():
        assert cli.main(["check", EXAMPLE, "--family", "swish", "--format", "json", "--report", str(tmp_path / "r.html")]) == 0
        formulas = {f["formula"]: f["report"] for f in json.loads(capsys.readouterr().out)["formulas"]}
        text = cli.text_table(cli.check_module(EXAMPLE, family="swish"))
    assert formulas["swish"]["training"]["outcome"] == "pass" and formulas["swish"]["training"]["parted"] == -1
    wrong = formulas["forgot chain rule"]
    assert wrong["training"]["outcome"] == "fail" and wrong["training"]["parted"] >= 1 and wrong["finding"]["kind"] in KINDS
    assert "training: follows the reference's path" in text and "training: its path parts" in text
    page = (tmp_path / "r.html").read_text()
    assert "<h3>Does it train: fail</h3>" in page and "paths part at step" in page  # its line and its curves


def test_a_formula_that_does_not_fit_its_reference_is_refused_alone_with_the_reason():
    module = str(ROOT / "tests" / "specimens" / "modules" / "mismatched_outputs.py")
    with families_kept():
        results = {r.formula: r for r in cli.check_module(module)}
    assert results["thrice"].outcome == "error" and "gives 3 output(s), the reference 2" in results["thrice"].summary
    assert results["twice"].outcome == "pass" and results["twice"].status == "ok"


def test_a_correct_first_order_function_exits_0_and_the_same_declared_twice_differentiable_exits_1(capsys):
    module = str(ROOT / "tests" / "specimens" / "modules" / "first_order_only.py")
    assert cli.main(["check", module, "--family", "cube in numpy", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["formulas"]
    assert row["report"]["second order"]["outcome"] == "first order only" and row["status"] == "ok"
    assert cli.main(["check", module, "--family", "cube in numpy, order 2"]) == 1
    assert "not differentiable" in capsys.readouterr().out


def test_kernels_pass_in_their_native_precision_and_their_writes_are_named_as_such(capsys):
    module = Path(__file__).parent / "specimens" / "modules" / "kernel_functions.py"
    assert cli.main(["check", str(module), "--shape", "4,6", "--format", "json"]) == 0
    results = {r["formula"]: r for r in json.loads(capsys.readouterr().out)["formulas"]}
    assert {f: r["status"] for f, r in results.items()} == {"float32 inside": "ok", "refuses float64": "ok", "half gradient": "caught",
                                                           "writes into saved": "ok", "writes into its input": "ok"}
    native = results["refuses float64"]["report"]["kernel"]["native"]
    assert (native["dtype"], native["raised_in"], native["raised"]) == ("float32", "backward", "KeyError")
    # their gradients are right (kernels such as Liger-Kernel's write so by design): each write is named, with its element
    saved = results["writes into saved"]["report"]["kernel"]["writes"]
    assert [(w["into"], w["input"], w["stage"]) for w in saved] == [("saved tensor", "x", "backward"), ("a second backward", "x", "backward")]
    assert saved[0]["element"].startswith("x[") and saved[0]["before"] != saved[0]["after"]
    (given,) = results["writes into its input"]["report"]["kernel"]["writes"]
    assert (given["into"], given["stage"]) == ("input", "forward")
    assert results["float32 inside"]["report"]["kernel"]["writes"] == []
    assert not any(r["contract"] for r in results.values())  # named as the kernel's facts, not a broken rule that fails the check
    assert results["half gradient"]["report"]["diagnosis"][0]["kind"] == "factor"
    assert not any("a differentiable backward" in c for r in results.values() for c in r["contract"])  # first order only


def test_a_formula_wrong_only_under_a_condition_says_so_as_its_why(capsys):
    module = Path(__file__).parent / "specimens" / "modules" / "condition_bugs.py"
    assert cli.main(["check", str(module), "--format", "json"]) == 0  # declared buggy, and caught
    results = {r["formula"]: r for r in json.loads(capsys.readouterr().out)["formulas"]}
    for formula in ("gated", "strided"):
        assert results[formula]["status"] == "caught" and results[formula]["report"]["failed condition"]
        condition = results[formula]["report"]["failed condition"]
        assert results[formula]["why"] == f"it fails only when {condition}"
    assert results["right"]["why"] is None
