"""Parity (``lib.engine.parity``): every specimen of the parity zoo is right in eager where it says
so (gradcheck's slow mode agrees), and its grid parts from eager on exactly the paths it names,
as "differs" or "raises"; every other path agrees, gives eager's gradient, or is not supported
with whose limit it is. Every correct gallery formula agrees wherever it is supported. A custom op
gets the verdict, diagnosis and Anatomy of its autograd.Function twin, and opcheck's four tests."""

from __future__ import annotations

import pytest
import torch

from gradient_lab.app.family import families
from gradient_lab.engine import parity as P
from gradient_lab.engine.report import PARITY_OUTCOMES
from gradient_lab.testing import check_gradients
from tests.specimens import parity as zoo
from tests.app.functions.test_gallery import GALLERY

pytestmark = pytest.mark.slow  # it compiles: kept to aot_eager and small inputs, inductor on one specimen
# every path but inductor's (one test below compiles with it)
QUICK = P.PARITY_SETS["quick"]
QUIET = ("agrees", "as eager", "not supported", "skipped")


def _specimen(name: str) -> zoo.Specimen:
    return next(s for s in zoo.SPECIMENS if s.name == name)


def grid_of(specimen: zoo.Specimen, which=QUICK):
    report = check_gradients(specimen.function, specimen.inputs(), reference=specimen.reference, conditions="none", parity=which, order=2)
    return report, report.parity


@pytest.mark.parametrize("specimen", zoo.SPECIMENS, ids=lambda s: s.name)
def test_each_specimen_parts_from_eager_exactly_where_it_says(specimen):
    report, grid = grid_of(specimen)
    assert report.verdict.passed is not specimen.eager_wrong
    parted = {c.key: c.outcome for c in grid.cells if c.outcome in ("differs", "raises")}
    expected = {k: v for k, v in specimen.parts.items() if k in QUICK}
    assert parted == expected, {c.key: (c.outcome, c.finding) for c in grid.cells}
    assert all(c.outcome in PARITY_OUTCOMES for c in grid.cells)
    for cell in grid.cells:
        if cell.outcome == "not supported":  # whose limit it is, always said; never a bare "not supported"
            assert cell.whose in ("the Function", "the op", "PyTorch") and cell.finding
        if cell.outcome == "differs":  # the evidence: an entry, its values, and the error map
            assert cell.finding and cell.differences
        if cell.outcome == "raises":
            assert cell.error


@pytest.mark.parametrize("specimen", [s for s in zoo.SPECIMENS if not s.eager_wrong], ids=lambda s: s.name)
def test_the_specimens_are_right_in_eager_as_gradcheck_slow_mode_says(specimen):
    x = specimen.inputs()[0].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(specimen.function, (x,), fast_mode=False)


def test_a_wrong_backward_is_as_eager_on_every_path_that_runs_its_backward():
    _, grid = grid_of(_specimen("its Function twin"))  # the Function whose backward forgets the 3
    assert grid.cell("eager").outcome == "differs" and "-26.2208" in grid.cell("eager").finding
    for key in ("aot_eager", "aot_eager fullgraph", "dynamic", "grad", "vjp", "jacrev"):
        assert grid.cell(key).outcome == "as eager", key


def test_a_custom_op_gets_the_verdict_and_diagnosis_of_its_function_twin_and_opcheck_passes_it():
    op = check_gradients(zoo.custom_cube, zoo._x(), reference=zoo.cube, conditions="none", parity=["eager"])
    twin = check_gradients(zoo.CubeForgetsThree.apply, zoo._x(), reference=zoo.cube, conditions="none", parity=["eager"])
    assert not op.verdict.passed and not twin.verdict.passed
    assert op.verdict.summary == twin.verdict.summary
    assert [f.kind for f in op.diagnosis.findings] == [f.kind for f in twin.diagnosis.findings] == ["factor"]
    assert op.parity.kind == "custom op" and twin.parity.kind == "autograd.Function"
    assert [t.name for t in op.parity.opcheck] == ["test_schema", "test_autograd_registration", "test_faketensor",
                                                   "test_aot_dispatch_dynamic"]
    assert all(t.passed for t in op.parity.opcheck)  # opcheck checks no numbers


def test_a_custom_op_without_a_fake_fails_opchecks_fake_tensor_tests_with_their_message():
    _, grid = grid_of(_specimen("custom op without a fake"), which=["eager", "aot_eager"])
    failed = {t.name: t.message for t in grid.opcheck if not t.passed}
    assert set(failed) == {"test_faketensor", "test_aot_dispatch_dynamic"}
    assert all("fake" in message for message in failed.values())
    assert grid.cell("aot_eager").outcome == "raises" and "fake" in grid.cell("aot_eager").error


def test_forward_mode_through_a_custom_op_is_never_agrees_and_never_the_ops_fault():
    _, grid = grid_of(_specimen("custom op sine"), which=["jvp", "jacfwd"])  # PyTorch returns zero tangents, silently
    for cell in grid.cells:
        assert cell.outcome == "not supported" and cell.whose == "PyTorch" and "zero tangents" in cell.finding


def test_limits_of_pytorch_are_said_as_pytorchs_and_missing_features_as_the_functions():
    _, grid = grid_of(_specimen("wrong jvp"), which=["aot_eager fullgraph", "aot_eager"])
    fullgraph = grid.cell("aot_eager fullgraph")
    assert fullgraph.outcome == "not supported" and fullgraph.whose == "PyTorch" and "custom jvp" in fullgraph.finding
    assert "agrees only trivially" in grid.cell("aot_eager").note  # it ran the Function eagerly inside the compiled region
    _, legacy = grid_of(_specimen("legacy sine"), which=["grad", "vmap"])
    assert {c.whose for c in legacy.cells} == {"the Function"} and all("setup_context" in c.finding for c in legacy.cells)


def test_graph_breaks_are_listed_with_the_users_line():
    _, grid = grid_of(_specimen(".item() in setup_context"), which=["aot_eager"])
    assert any("item()" in b and "(at parity.py:" in b for b in grid.graph_breaks), grid.graph_breaks


def test_dynamic_compiles_once_per_calling_convention_and_counts_no_recompile_at_the_second_size():
    _, grid = grid_of(_specimen("sine"), which=["dynamic"])
    cell = grid.cell("dynamic")
    assert cell.outcome == "agrees" and cell.graphs >= 1 and cell.recompiles == 0


def test_inductor_paths_catch_a_fallback_under_compile():
    specimen = _specimen("fallback under compile")
    _, grid = grid_of(specimen, which=["inductor", "inductor fullgraph"])
    if not P.HAS_COMPILER:
        assert {c.outcome for c in grid.cells} == {"skipped"}
        return
    assert [c.outcome for c in grid.cells] == ["differs", "differs"]
    assert grid.cell("inductor").worst.startswith("x[")


@pytest.mark.parametrize("name", ["cosine", *GALLERY])
def test_every_correct_gallery_formula_agrees_wherever_it_is_supported(name):
    family = families()[name]
    formula = next(n for n, f in family.formulas.items() if f.correct)
    inputs = family.build_inputs((3, 4), seed=0, dtype=torch.float64, device="cpu", broadcast=False, **family.params)
    from gradient_lab.engine.pipeline import compare_gradients

    report = compare_gradients(family, formula, inputs, params=family.params, conditions="none", parity=QUICK)
    assert report.verdict.passed
    assert not report.parity.parted, {c.key: c.finding for c in report.parity.parted}
    assert all(c.outcome in QUIET for c in report.parity.cells)
    assert report.parity.cell("eager").outcome == "agrees"


# ---- the canary and the pieces --------------------------------------------------------------------------------


class StraightThroughRound(torch.autograd.Function):
    """Round in forward, the identity in backward: its backward is not autograd through its forward."""

    @staticmethod
    def forward(x):
        return torch.round(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g


def test_the_canary_marks_a_compiled_gradient_that_is_autograd_through_the_forward():
    x = (torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3,)
    report = check_gradients(StraightThroughRound.apply, x, surrogate=lambda x: x + (torch.round(x) - x).detach(),
                             conditions="none", parity=["eager", "aot_eager"])
    grid = report.parity
    assert grid.cell("aot_eager").outcome == "agrees" and grid.canary.startswith("armed")
    # a compiled path that gave the forward's own gradient (zero: round is flat) is said to have bypassed the backward
    run = _run_of(StraightThroughRound.apply, x)
    assert P._bypass(run).startswith("armed")
    differs = P.ParityCell("aot_eager", "torch.compile", "torch.compile (aot_eager)", "differs", finding="…")
    marked = P._with_canary(run, differs, run.bypass)
    assert marked.bypassed and marked.finding.startswith("custom backward bypassed")
    assert not P._with_canary(run, differs, [[g + 1 for g in gs] for gs in run.bypass]).bypassed


def _run_of(function, inputs):
    from gradient_lab.engine.tolerances import default_tolerances
    from gradient_lab.testing import as_family

    family = as_family(function, inputs, reference=lambda x: x + (torch.round(x) - x).detach())
    problem = family.problem(family.name, inputs)
    tolerances = default_tolerances(torch.float64)
    from gradient_lab.engine.pipeline import plan

    truth = P._Truth(problem, tolerances, None, plan(problem, tolerances), 0, 1 << 28)
    return P._Run(problem, truth, tolerances, False, False, 1, StraightThroughRound)


def test_paths_of_reads_sets_and_keys_and_refuses_an_unknown_one():
    assert [p.key for p in P.paths_of("all")] == list(P.PATH_KEYS)
    assert all(not p.inductor for p in P.paths_of("quick"))
    assert [p.key for p in P.paths_of("vmap,eager")] == ["eager", "vmap"]
    with pytest.raises(ValueError, match="unknown parity path 'jit'"):
        P.paths_of(["jit"])


def test_a_raise_is_classified_by_whose_limit_it_is():
    path = P.PATHS[0]
    assert P._raised(path, RuntimeError("Unsupported custom jvp"), False).whose == "PyTorch"
    assert P._raised(path, RuntimeError("x does not have vmap support"), False).whose == "the Function"
    raised = P._raised(path, RuntimeError("boom"), True)
    assert raised.outcome == "raises" and raised.whose == "the op" and raised.error == "RuntimeError: boom"
