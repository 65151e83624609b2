"""The family registry: families are found by name, and an unknown name says what is known."""

import pytest
import torch

from gradient_lab.app.family import Family, Formula, families, get_family, register, unregister


def test_cosine_is_a_builtin_family():
    assert "cosine" in families()
    assert get_family("cosine").input_names == ("x1", "x2")


def test_unknown_family_and_formula_name_what_exists():
    with pytest.raises(KeyError, match="no family named 'nope'.*cosine"):
        get_family("nope")
    with pytest.raises(KeyError, match="has no formula 'nope'.*corrected"):
        get_family("cosine").formula("nope")


def test_registering_a_family_makes_it_available_and_run_merges_params():
    double = Formula("double", lambda x, scale=1.0: 2 * x * scale, "doubles", r"2", correct=True)
    family = Family(
        name="test-double",
        title="Doubling",
        description="y = 2x",
        input_names=("x",),
        reference=lambda x, scale=1.0: 2 * x * scale,
        formulas={"double": double},
        build_inputs=lambda shape, **_: (torch.ones(shape, dtype=torch.float64),),
        loss=torch.sum,
        params={"scale": 3.0},
    )
    register(family)
    try:
        assert get_family("test-double") is family
        (x,) = family.build_inputs((2,))
        assert family.run("double", (x,)).tolist() == [6.0, 6.0]
        assert family.run(None, (x,), scale=0.5).tolist() == [1.0, 1.0]
    finally:
        assert unregister("test-double") is family
    assert "test-double" not in families() and unregister("test-double") is None


def test_builtin_families_come_first_in_their_modules_order():
    import gradient_lab.app.functions.gelu  # noqa: F401 - imported before the others on purpose

    names = list(families())
    assert names[0] == "cosine"
    assert names.index("logsumexp") < names.index("gelu")


def test_declare_takes_a_surrogate_and_an_order_and_knows_the_module_that_declared_it():
    import torch

    from gradient_lab.app.family import declare
    from tests.registry import families_kept

    class Reversal(torch.autograd.Function):  # a gradient reversal: -g by design
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return -g

    with families_kept():
        family = declare("reversal", {"grl": Reversal}, surrogate=lambda x: 2 * x.detach() - x, order=1, correct=("grl",))
        assert family.surrogate is not None and family.order == 1
        assert family.module == ""  # declared inside a function: no module's import declares it again
        problem = family.problem("grl", (torch.randn(3, 4, dtype=torch.float64),))
        assert problem.role == "surrogate" and problem.reference is not None
        with pytest.raises(ValueError, match="order must be 1 or 2"):
            declare("three", {"grl": Reversal}, order=3)


def test_declared_batch_dims_reach_the_problem_and_bad_ones_are_refused():
    from gradient_lab.app.family import declare
    from tests.registry import families_kept

    with families_kept():
        family = declare("biased", {"add": lambda x, bias: x + bias}, inputs=("x", "bias"), batch_dims=(0, None))
        problem = family.problem("add", (torch.randn(3, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)))
        assert problem.batch_dims == (0, None) and problem.remake(problem.given).batch_dims == (0, None)
        with pytest.raises(ValueError, match="one int or None per input"):
            declare("short", {"add": lambda x, bias: x + bias}, inputs=("x", "bias"), batch_dims=(0,))
