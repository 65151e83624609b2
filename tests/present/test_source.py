"""A formula's backward as source, and the diff from the correct one."""

import torch

from gradient_lab.app.family import Formula, get_family
from gradient_lab.engine.signature import function_class
from gradient_lab.present.source import backward_diff, backward_source
from tests.specimens import zoo


def test_the_function_behind_apply_is_found():
    assert function_class(zoo.Square.apply) is zoo.Square
    assert function_class(lambda x: x) is None and function_class(torch.sin) is None


def test_the_backward_of_a_function_is_its_source():
    formula = Formula("f", zoo.SineSignFlipped.apply, "", "", False)
    source = backward_source(formula)
    assert source.startswith("@staticmethod\ndef backward(ctx, g):") and "-torch.cos(x) * g" in source


def test_the_diff_shows_the_line_the_bug_changed():
    right = Formula("square", zoo.Square.apply, "", "", True)
    wrong = Formula("ignores", zoo.SquareIgnoresGradOutput.apply, "", "", False)
    diff = backward_diff(wrong, right)
    # the fix: the bug's lines removed (red), the correct ones added (green)
    assert "--- ignores (buggy)" in diff and "+++ square (correct)" in diff
    assert "+    return 2 * x * g\n" in diff and "-    return 2 * x  # grad_output ignored\n" in diff
    assert backward_diff(right, right) is None


def test_every_gallery_bug_has_a_diff():
    family = get_family("softmax")
    right = family.formula("corrected")
    for formula in family.formulas.values():
        if not formula.correct:
            assert backward_diff(formula, right), formula.name


def test_a_formula_without_source_has_none():
    exec_namespace = {}
    exec("def made(x):\n    return x\n", exec_namespace)  # noqa: S102 - a function with no file behind it
    assert backward_source(Formula("made", exec_namespace["made"], "", "", False)) is None
