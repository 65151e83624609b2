"""gradient_lab.contract.anatomy: what a Function saved and returned, its graph, and every rule of the contract it
breaks, each named with its tensor or input (tests/specimens/contracts.py); nothing for a Function that
keeps them."""

import inspect

import pytest
import torch

from gradient_lab.contract.anatomy import anatomy, rows_broken, rows_returned, rows_saved
from tests.specimens.contracts import (BROKEN, KEPT, CachesInADict, Doubled, FilledKeyByKey, Good, InputsInATuple, MetadataInContainers,
                                       PairInSetupContext, PerLayerCaches, StateAsANamedtuple, StatesAppended, TensorOnCtx, TensorsInAList,
                                       checkpointed, formula)

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


# ---- tensors kept on ctx, however they are kept: each by its path and the line that put it there ---------------------

KEPT_RULE = "tensors are saved with save_for_backward"


def line_of(source, text: str) -> int:
    """The line of the file holding ``source`` (a class or function) where ``text`` first appears."""
    lines, start = inspect.getsourcelines(source)
    return next(start + i for i, line in enumerate(lines) if text in line)


def kept_on_ctx(found) -> dict[str, tuple[str, int | None]]:
    """Each tensor the lint found kept on ctx: its path -> (severity, line)."""
    return {k.path: (b.severity, k.line) for b in found.broken if b.rule == KEPT_RULE for k in b.kept}


# specimen -> {path: (severity, the text of the line that stored it)}
IN_CONTAINERS = {
    "a dict": (CachesInADict, {"ctx.cache['weights']": ("warning", 'ctx.cache = {"weights"')}),
    "a tuple of the inputs": (InputsInATuple, {"ctx.items[0]": ("error", "ctx.items = (x, y)"), "ctx.items[1]": ("error", "ctx.items = (x, y)")}),
    "a list appended in a loop": (StatesAppended, {"ctx.states[0]": ("warning", "ctx.states.append(h)"),
                                                   "ctx.states[1]": ("warning", "ctx.states.append(h)")}),
    "a dict in a list, over lines": (PerLayerCaches, {"ctx.layers[0]['act']": ("warning", '{"act": torch.relu(hidden)')}),
    "a dict filled key by key": (FilledKeyByKey, {"ctx.cache['lse']": ("note", 'ctx.cache["lse"] ='),
                                                  "ctx.cache['probs']": ("warning", 'ctx.cache["probs"] =')}),
    "a namedtuple": (StateAsANamedtuple, {"ctx.state.h": ("warning", "ctx.state = CellState("), "ctx.state.c": ("warning", "ctx.state = CellState(")}),
    "a list in setup_context": (PairInSetupContext, {"ctx.pair[0]": ("error", "ctx.pair = [x, y]"), "ctx.pair[1]": ("error", "ctx.pair = [x, y]")}),
    "a list (the old specimen)": (TensorsInAList, {"ctx.kept[0]": ("error", "ctx.kept = [x, y]"), "ctx.kept[1]": ("error", "ctx.kept = [x, y]")}),
    "an attribute": (TensorOnCtx, {"ctx.y": ("error", "ctx.y = y")}),
}


@pytest.mark.parametrize("name", list(IN_CONTAINERS))
def test_tensors_kept_on_ctx_in_containers_are_found_by_path_and_line(name):
    function, expected = IN_CONTAINERS[name]
    found = anatomy(function.apply, inputs(), NAMES, timed=False)
    assert kept_on_ctx(found) == {path: (severity, line_of(function, text)) for path, (severity, text) in expected.items()}
    # a bool mask beside the activation, an int in the dict, the saved inputs: nothing said of them
    assert all(k.dtype == "float64" and k.shape in ((3, 4), (3,)) for b in found.broken for k in b.kept)
    assert {b.rule for b in found.broken} - {"no gradient where none is needed"} == {KEPT_RULE}  # the older two also waste y's gradient


def test_the_words_name_each_tensors_path_and_line():
    found = anatomy(CachesInADict.apply, inputs(), NAMES, timed=False)
    (warning,) = found.broken
    line = line_of(CachesInADict, 'ctx.cache = {"weights"')
    assert warning.message.startswith(f"ctx.cache['weights'] (line {line}) holds a tensor (3, 4) computed in forward from its input, in a dict")
    (error,) = anatomy(InputsInATuple.apply, inputs(), NAMES, timed=False).broken
    assert f"(ctx.items[0], ctx.items[1]; line {line_of(InputsInATuple, 'ctx.items = (x, y)')})" in error.message


def test_containers_of_sizes_dtypes_and_options_on_ctx_are_silent():
    found = anatomy(MetadataInContainers.apply, inputs(), NAMES, timed=False)
    assert found.broken == []
    assert set(found.attributes) == {"sizes", "options", "flags"}


def test_each_element_is_given_the_line_that_added_it():
    class Grows(Good):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            ctx.buf = [x * 2]
            ctx.buf.append(x * 3)
            ctx.buf.extend([x * 4,
                            x * 5])
            ctx.stats = {}
            ctx.stats.update(mean=x.mean(-1))
            ctx.stats.setdefault("square", x * x)
            setattr(ctx, "shifted", x + 1)  # noqa: B010 - a way of storing the lint must read
            ctx.low, ctx.high = x - 1, x + 1
            ctx.twice = []
            for _ in range(2):  # two calls in a loop: which added which is not in the source, so the list's own line
                ctx.twice.append(x * 6)
                ctx.twice.append(x * 7)
            return x * y

    found = anatomy(Grows.apply, inputs(), NAMES, timed=False)
    at = {text: line_of(Grows, text) for text in ("[x * 2]", "(x * 3)", "[x * 4,", "x * 5])", "update(", "setdefault(", "setattr(", "ctx.low,",
                                                  "ctx.twice = []")}
    assert kept_on_ctx(found) == {
        "ctx.buf[0]": ("warning", at["[x * 2]"]), "ctx.buf[1]": ("warning", at["(x * 3)"]), "ctx.buf[2]": ("warning", at["[x * 4,"]),
        "ctx.buf[3]": ("warning", at["x * 5])"]), "ctx.stats['mean']": ("note", at["update("]), "ctx.stats['square']": ("warning", at["setdefault("]),
        "ctx.shifted": ("warning", at["setattr("]), "ctx.low": ("warning", at["ctx.low,"]), "ctx.high": ("warning", at["ctx.low,"]),
        **{f"ctx.twice[{i}]": ("warning", at["ctx.twice = []"]) for i in range(4)}}


def _stash(ctx, t):
    ctx.extra = {"t": t}


def test_a_tensor_a_helper_put_on_ctx_is_named_without_a_line():
    class ByAHelper(Good):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            _stash(ctx, x * 2)
            return x * y

    found = anatomy(ByAHelper.apply, inputs(), NAMES, timed=False)
    assert kept_on_ctx(found) == {"ctx.extra['t']": ("warning", None)}
    assert found.broken[0].message.startswith("ctx.extra['t'] holds a tensor (3, 4)")


def test_the_tutorials_sinh_and_torchs_cross_map_lrn_are_given_their_lines():
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
    line = line_of(SinhBad, "ctx.expx, ctx.expnegx =")
    assert kept_on_ctx(anatomy(SinhBad.apply, (x,), ("x",), timed=False)) == {"ctx.expx": ("warning", line), "ctx.expnegx": ("warning", line)}

    from torch.nn.modules._functions import CrossMapLRN2d

    x = torch.randn(2, 4, 3, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    found = anatomy(lambda x: CrossMapLRN2d.apply(x, 3), (x,), ("x",), timed=False)
    # it sets ctx.scale to None, then to a buffer it fills in place: the line that made the tensor
    assert kept_on_ctx(found) == {"ctx.scale": ("warning", line_of(CrossMapLRN2d.forward, "ctx.scale = ctx.scale or input.new()"))}
