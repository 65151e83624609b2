"""gradient_lab.contract.anatomy: what a Function saved and returned, its graph, and every rule of the contract it
breaks, each named with its tensor or input (tests/contract_zoo.py); nothing for a Function that
keeps them."""

import pytest
import torch

from gradient_lab.contract.anatomy import anatomy, rows_broken, rows_returned, rows_saved
from tests.contract_zoo import BROKEN, Good, formula

NAMES = ("x", "y")


def inputs():
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(3, 4, generator=generator, dtype=torch.float64) for _ in NAMES)


@pytest.mark.parametrize("name", list(BROKEN))
def test_each_broken_rule_is_named_with_its_tensor_or_input(name):
    function, rule, word = BROKEN[name]
    found = anatomy(formula(function), inputs(), NAMES, timed=False)
    named = [b for b in found.broken if b.rule == rule]
    assert named and any(word in b.message for b in named), [(b.rule, b.message) for b in found.broken]


def test_a_function_that_keeps_the_contract_shows_its_anatomy_and_nothing_broken():
    found = anatomy(Good.apply, inputs(), NAMES, reference=lambda x, y: x * y)
    assert found.broken == [] and found.function == "Good" and found.custom == ("GoodBackward",)
    assert [(s.kind, s.shape, s.bytes, s.node) for s in found.saved] == [("input x", (3, 4), 96, "GoodBackward"),
                                                                         ("input y", (3, 4), 96, "GoodBackward")]
    assert found.saved_bytes == found.reference_bytes == 192  # autograd's MulBackward saves the same two
    assert [(r.input, r.needs_grad, r.shape, r.dtype) for r in found.returned] == [("x", True, (3, 4), "float64"),
                                                                                ("y", True, (3, 4), "float64")]
    assert found.cost["formula"].forward_ms > 0 and "reference" in found.cost
    assert "GoodBackward" in found.dot and "(custom Function)" in found.dot and found.dot.count("->") == 3
    assert rows_saved(found.saved)[0]["changed in place after saving"] == "no"
    assert rows_returned(found.returned)[1]["returned"] == "(3, 4)" and rows_broken(found.broken) == []


def test_a_saved_tensor_changed_after_forward_is_named_and_pytorch_would_raise():
    def formula(x, y):
        a = x * 1.0
        out = Good.apply(a, y)
        a.add_(1.0)  # after the Function returned: PyTorch's version check catches this one
        return out

    found = anatomy(formula, inputs(), NAMES, timed=False)
    changed = [b for b in found.broken if b.rule == "saved tensors are not changed in place"]
    assert changed and "after forward returned: PyTorch raises" in changed[0].message and "saved tensor #1" in changed[0].message


def test_a_forward_that_raises_is_said_in_words_with_what_the_class_shows():
    function = BROKEN["two styles"][0]
    found = anatomy(function.apply, inputs(), NAMES)
    rules = [b.rule for b in found.broken]
    assert rules == ["forward runs", "one style of forward"] and found.saved == [] and found.cost == {}


def test_the_gallerys_correct_functions_break_no_rule():
    from gradient_lab.app.family import families

    for name, family in families().items():
        xs = family.build_inputs((4, 6))
        for correct in (f for f, spec in family.formulas.items() if spec.correct):
            problem = family.problem(correct, xs)  # as the app takes it apart: in the engine's canonical form
            found = anatomy(problem.function, problem.inputs, problem.names, timed=False)
            assert found.broken == [], (name, [(b.rule, b.message) for b in found.broken])
