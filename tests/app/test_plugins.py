"""Users' modules: found from the command line and the environment, loaded once, failures said."""

from pathlib import Path

import numpy as np
import pytest

from gradient_lab.app import plugins
from gradient_lab.engine.pipeline import compare_gradients
from gradient_lab.engine.report import Failure
from gradient_lab.app.family import families, get_family
from tests.registry import restore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "my_functions.py")
FIXTURES = ROOT / "tests" / "specimens" / "modules"


@pytest.fixture(autouse=True)
def clean_registry():
    """Families declared by a test do not outlive it."""
    before = dict(families())  # built-ins imported first
    loaded = dict(plugins._LOADED)
    yield
    restore(before)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)


def test_sources_come_from_arguments_and_environment_in_order_without_repeats():
    argv = ["--functions", "a.b", "--server.port", "1", "--functions=c.py", "--functions", "a.b"]
    env = {"GRADIENT_LAB_FUNCTIONS": "d.py, e.f"}
    assert plugins.requested_sources(argv, env) == ["a.b", "c.py", "d.py", "e.f"]
    assert plugins.requested_sources([], {}) == []


def test_the_shipped_example_loads_from_its_path_and_works_across_the_engine():
    result = plugins.load(EXAMPLE)
    assert result.error is None and result.families == ("swish", "clamp", "row max", "cross entropy")
    family = get_family("swish")
    assert [n for n, f in family.formulas.items() if f.correct] == ["swish"]
    inputs = family.build_inputs((4, 6), seed=0)
    right = compare_gradients(family, "swish", inputs)
    assert right.verdict.passed, right.verdict.summary
    wrong = compare_gradients(family, "forgot chain rule", inputs)
    assert not wrong.verdict.passed
    c = wrong.input("x")
    # the missing term x·s·(1 − s) is largest where |x| is near 2.4: the worst element is there
    x = inputs[0].numpy()
    term = np.abs(x / (1 + np.exp(-x)) * (1 - 1 / (1 + np.exp(-x))))
    assert c.errors[("analytic", "reference")].worst == tuple(int(i) for i in np.unravel_index(term.argmax(), x.shape))


def test_a_dotted_module_name_is_imported_from_the_working_directory(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = plugins.load("examples.my_functions")
    assert result.error is None and result.families == ("swish", "clamp", "row max", "cross entropy")


def test_failures_are_reported_with_pythons_message():
    broken = plugins.load(str(FIXTURES / "broken_import.py"))
    assert broken.families == () and broken.error.startswith("ImportError: this module needs a package")
    assert "broken_import.py, line 3" in broken.error
    nothing = plugins.load(str(FIXTURES / "declares_nothing.py"))
    assert "declares no family" in nothing.error
    missing = plugins.load("no/such/file.py")
    assert missing.error.startswith("FileNotFoundError")
    unknown = plugins.load("no_such_package.functions")
    assert unknown.error.startswith("ModuleNotFoundError")


def test_functions_raising_in_forward_or_backward_are_reported_by_the_engine():
    assert plugins.load(str(FIXTURES / "raising_function.py")).families == ("raising",)
    family = get_family("raising")
    inputs = family.build_inputs((3, 4))
    forward = compare_gradients(family, "forward raises", inputs)
    assert forward.failure == Failure("forward", "ValueError", "forward is not written yet") and not forward.verdict.passed
    backward = compare_gradients(family, "backward raises", inputs)
    assert backward.failure == Failure("backward", "RuntimeError", "backward blew up")


def test_each_source_is_loaded_once_per_process():
    first = plugins.ensure_loaded([EXAMPLE])
    family = get_family("swish")
    again = plugins.ensure_loaded([EXAMPLE])
    assert first == again and get_family("swish") is family


def test_the_shipped_clamp_sits_on_its_kinks_and_passes_there_while_its_leak_is_placed():
    assert plugins.load(EXAMPLE).error is None
    family = get_family("clamp")
    inputs = family.build_inputs((6, 8), seed=0)
    on_bounds = int((inputs[0].abs() == 1).sum())
    right = compare_gradients(family, "clamp", inputs)
    assert right.verdict.passed and right.input("x").kinks.size == on_bounds > 0, right.verdict.summary
    wrong = compare_gradients(family, "leaks outside", inputs)
    assert "wrong only where 1 < |x| ≤ 2" in wrong.verdict.summary


MODULE = '''
import torch
from gradient_lab import declare


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return {factor} * x * g


declare("edited square", formulas={{"square": Square}}, correct=("square",), reference=lambda x: x * x)
'''


def test_an_edited_module_is_loaded_again_and_its_new_code_is_checked(tmp_path):
    import torch

    from gradient_lab.app import plugins
    from gradient_lab.app.family import families
    from gradient_lab.testing import check_gradients
    from tests.registry import families_kept

    path = tmp_path / "edited_square.py"
    path.write_text(MODULE.format(factor=1))  # the bug: 1 where 2 belongs
    source = str(path)
    with families_kept():
        try:
            (first,) = plugins.ensure_loaded([source])
            x = torch.randn(3, 4, dtype=torch.float64)
            assert not first.reloaded and not check_gradients(families()["edited square"].formula("square").function, x,
                                                               reference=lambda x: x * x, conditions="none", training=0).verdict.passed
            assert not plugins.ensure_loaded([source])[0].reloaded  # unchanged: not loaded again
            path.write_text(MODULE.format(factor=2))  # fixed
            (again,) = plugins.ensure_loaded([source])
            assert again.reloaded and again.digest != first.digest
            assert check_gradients(families()["edited square"].formula("square").function, x, reference=lambda x: x * x,
                                   conditions="none", training=0).verdict.passed
        finally:
            plugins._LOADED.pop(source, None)
