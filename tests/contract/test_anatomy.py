"""gradient_lab.contract.anatomy: what a Function saved and returned, its graph, and every rule of the contract it
breaks, each named with its tensor or input (tests/specimens/contracts.py); nothing for a Function that
keeps them."""

import pytest
import torch

from gradient_lab.contract.anatomy import anatomy, rows_broken, rows_returned, rows_saved
from tests.specimens.contracts import BROKEN, KEPT, Doubled, Good, checkpointed, formula

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


@pytest.mark.parametrize("name", list(KEPT))
def test_functions_as_people_ship_them_break_no_rule(name):
    found = anatomy(KEPT[name].apply, inputs(), NAMES, timed=False)
    assert found.errors() == [], [(b.rule, b.message) for b in found.broken]
    assert [(r.input, r.needs_grad, r.shape) for r in found.returned] == [("x", True, (3, 4)), ("y", True, (3, 4))]
    assert all(not s.changed for s in found.saved)


def test_classmethods_get_nothing_at_all():
    found = anatomy(KEPT["classmethods"].apply, inputs(), NAMES, timed=False)
    assert found.broken == [] and found.function == "Classmethods"
    assert [(s.kind, s.node) for s in found.saved] == [("input x", "ClassmethodsBackward"), ("input y", "ClassmethodsBackward")]


def test_each_save_is_its_own_ctxs():
    # the nested Function's save is never kept (grad mode is off inside forward); the outer one's
    # is what it saved, at the version it had when it asked, and PyTorch saw nothing change
    found = anatomy(KEPT["edits after a nested apply"].apply, inputs(), NAMES, timed=False)
    node = "EditsAfterANestedApplyBackward"
    assert [(s.kind, s.version, s.node, s.changed) for s in found.saved] == [("intermediate", 1, node, ""), ("input y", 0, node, "")]


def test_a_function_applied_under_enable_grad_inside_forward_is_not_part_of_the_graph():
    class Recomputes(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            a = x.detach().requires_grad_()
            with torch.enable_grad():
                doubled = Doubled.apply(a)  # a graph of its own, dropped when forward returns
            with torch.no_grad():
                a.add_(1.0)
            ctx.save_for_backward(x, y)
            return doubled.detach() * y

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return 2 * g * y, 2 * g * x

    found = anatomy(Recomputes.apply, inputs(), NAMES, timed=False)
    assert found.errors() == [] and [s.node for s in found.saved] == ["RecomputesBackward"] * 2


def test_out_parameters_in_backward_run_first_order_and_double_backward_is_said_apart():
    found = anatomy(KEPT["out= in backward"].apply, inputs(), NAMES, timed=False)
    assert [(b.severity, b.rule) for b in found.broken] == [("note", "a differentiable backward")]
    assert "create_graph=True" in found.broken[0].message and "out=" in found.broken[0].message


def test_state_indices_and_masks_on_ctx_are_named_and_not_flagged():
    found = anatomy(KEPT["state on ctx"].apply, inputs(), NAMES, timed=False)
    assert found.broken == []
    assert "random generator's state" in found.attributes["rng_state"]
    assert found.attributes["order"] == "tensor (12,) int64" and found.attributes["positive"] == "tensor (3, 4) bool"


def test_an_activation_made_inside_forward_and_kept_on_ctx_is_a_warning_and_other_floats_a_note():
    class KeepsItsActivation(Good):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            ctx.product = x * y  # made under no_grad from the inputs: a double backward cannot see how it depends on them
            ctx.table = torch.ones(7)  # a float buffer of its own: only saved-tensor hooks miss it
            return ctx.product.clone()

    found = anatomy(KeepsItsActivation.apply, inputs(), NAMES, timed=False)
    kept = {b.message.split()[0]: b.severity for b in found.broken if "ctx." in b.message}
    assert kept == {"ctx.product": "warning", "ctx.table": "note"}
    assert found.errors() and all(b.severity == "warning" for b in found.errors())


def test_the_tutorials_what_not_to_do_sinh_is_named():
    # PyTorch's "Double Backward with Custom Functions" tutorial, its example of what not to do (re-created)
    class SinhBad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            expx, expnegx = torch.exp(x), torch.exp(-x)
            ctx.expx, ctx.expnegx = expx, expnegx
            return (expx - expnegx) / 2

        @staticmethod
        def backward(ctx, grad_out):
            return grad_out * (ctx.expx + ctx.expnegx) / 2

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    found = anatomy(SinhBad.apply, (x,), ("x",), timed=False)
    named = sorted(b.message.split()[0] for b in found.errors() if b.rule == "tensors are saved with save_for_backward")
    assert named == ["ctx.expnegx", "ctx.expx"]


def test_reentrant_checkpoint_as_torch_ships_it():
    found = anatomy(checkpointed, inputs(), NAMES)
    # its RNG state is named for what it is; reentrant checkpointing computes its gradient without a
    # graph, so it has no double backward, and that is the one thing said
    assert [(b.severity, b.rule) for b in found.errors()] == [("error", "a differentiable backward")]
    assert "random generator's state" in found.attributes["fwd_cpu_state"]
    assert [(r.input, r.needs_grad, r.shape) for r in found.returned] == [("run_function", False, None), ("preserve_rng_state", False, None),
                                                                         ("x", True, (3, 4)), ("y", True, (3, 4))]
    assert "formula" in found.cost  # timed with backward(), which reentrant checkpointing accepts


def test_torchs_own_cross_map_lrn_is_told_its_scale_belongs_in_save_for_backward():
    from torch.nn.modules._functions import CrossMapLRN2d

    x = torch.randn(2, 4, 3, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    found = anatomy(lambda x: CrossMapLRN2d.apply(x, 3), (x,), ("x",), timed=False)
    # it keeps its scale (made in forward from the input) on ctx: a warning; it returns Nones for its defaults and
    # writes with out=: notes
    assert [(b.rule, b.message.split()[0]) for b in found.errors()] == [("tensors are saved with save_for_backward", "ctx.scale")]
    assert {b.rule for b in found.broken} == {"tensors are saved with save_for_backward", "one gradient per input", "a differentiable backward"}
    assert [(r.input, r.needs_grad) for r in found.returned] == [("x", True), ("size", False)]


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
