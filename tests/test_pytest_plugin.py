"""The pytest plugin (gradient_lab.pytest_plugin, registered as a pytest11 entry point when installed):
one HTML report of every assert_gradients_match call of a session, and the gradient_lab_check fixture."""

import html
from pathlib import Path

# loaded before pytester's in-process runs, which forget the modules a run imported (numpy cannot load twice)
import gradient_lab.cli  # noqa: F401
import gradient_lab.pytest_plugin  # noqa: F401
import gradient_lab.testing  # noqa: F401

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]

USERS_TESTS = '''
import torch
from gradient_lab import assert_gradients_match


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class SquareForgotTwo(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return x * g


X = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def test_right():
    assert_gradients_match(Square, (X,), reference=lambda x: x * x, order=2)


def test_wrong():
    assert_gradients_match(SquareForgotTwo, (X,), reference=lambda x: x * x)
'''


def test_the_report_holds_every_check_pass_and_fail_under_its_test_and_function(pytester):
    pytester.makepyfile(test_users=USERS_TESTS)
    report = pytester.path / "gradients.html"
    result = pytester.runpytest("-p", "gradient_lab.pytest_plugin", f"--gradient-report={report}")
    result.assert_outcomes(passed=1, failed=1)
    text = html.unescape(report.read_text(encoding="utf-8"))
    assert "test_users.py::test_right" in text and "test_users.py::test_wrong" in text
    assert "Square" in text and "SquareForgotTwo" in text and "2 checks, 1 failed" in text
    assert "off by a constant factor 0.5" in text  # the failing check's diagnosis
    result.stdout.fnmatch_lines([f"gradient report: {report} (2 checks)"])


def test_without_the_option_no_report_is_written(pytester):
    pytester.makepyfile(test_users=USERS_TESTS)
    result = pytester.runpytest("-p", "gradient_lab.pytest_plugin", "-k", "right")
    result.assert_outcomes(passed=1, deselected=1)
    assert not list(pytester.path.glob("*.html"))


def test_the_fixture_checks_a_modules_families_and_fails_on_a_correct_formula_that_fails(pytester):
    example, broken = ROOT / "examples" / "my_functions.py", ROOT / "tests" / "specimens" / "modules" / "broken_correct.py"
    pytester.makepyfile(test_modules=f'''
def test_example(gradient_lab_check):
    results = gradient_lab_check({str(example)!r}, family="swish", shape=(3, 4))
    assert [r.status for r in results] == ["ok", "caught"]


def test_broken(gradient_lab_check):
    gradient_lab_check({str(broken)!r}, shape=(3, 4))
''')
    report = pytester.path / "modules.html"
    result = pytester.runpytest("-p", "gradient_lab.pytest_plugin", f"--gradient-report={report}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*is declared correct and fails:*", "*constant factor 0.5*"])
    text = html.unescape(report.read_text(encoding="utf-8"))
    assert "test_modules.py::test_example" in text and "swish / forgot chain rule" in text and "test_modules.py::test_broken" in text


FOUR_CHECKS = '''
import torch
from gradient_lab import assert_gradients_match

X = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def first(x):
    return x * x


def second(x):
    return x.sin()


def third(x):
    return x.exp()


def fourth(x):
    return x.tanh()


def test_one():
    assert_gradients_match(first, (X,), reference=lambda x: x * x)


def test_two():
    assert_gradients_match(second, (X,), reference=torch.sin)


def test_three():
    assert_gradients_match(third, (X,), reference=torch.exp)


def test_four():
    assert_gradients_match(fourth, (X,), reference=torch.tanh)
'''


def test_under_xdist_every_workers_checks_reach_one_report_in_the_order_of_the_tests(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers are processes of their own: gradient_lab from this checkout
    pytester.makepyfile(test_four=FOUR_CHECKS)
    report = pytester.path / "r.html"
    result = pytester.runpytest_subprocess("-n", "2", "-p", "gradient_lab.pytest_plugin", f"--gradient-report={report}")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([f"gradient report: {report} (4 checks)"])
    text = html.unescape(report.read_text(encoding="utf-8"))
    assert "4 checks, 0 failed" in text
    rows = [text.index(f"test_four.py::test_{n}</td><td>{f}</td>") for n, f in (("one", "first"), ("two", "second"), ("three", "third"),
                                                                                ("four", "fourth"))]
    assert rows == sorted(rows)  # the tests' order, whichever worker ran which


def test_loading_the_plugin_imports_neither_torch_nor_streamlit(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest('''
import sys

def pytest_sessionfinish(session):
    heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "streamlit", "plotly", "numpy"})
    print("heavy modules:", heavy or "none")
''')
    pytester.makepyfile(test_plain="def test_nothing_to_do_with_gradients():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-s", "-p", "gradient_lab.pytest_plugin", "--gradient-report=r.html")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*heavy modules: none*"])
