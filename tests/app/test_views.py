"""Views: what pages compute, refused in words before anything large is allocated."""

import pytest

from gradient_lab.app import views
from gradient_lab.app.case import Case
from gradient_lab.errors import LabError


@pytest.fixture
def no_inputs(monkeypatch):
    """Building inputs is an error: a refusal must come before any allocation."""
    monkeypatch.setattr(Case, "inputs", lambda self: pytest.fail("inputs were built before the refusal"))


def test_verdicts_cover_every_chosen_formula():
    reports = views.verdicts(Case(formulas=("tutorial", "corrected"), shape=(4, 6)))
    assert [r.formula for r in reports] == ["tutorial", "corrected"]
    assert [r.verdict.passed for r in reports] == [False, True]


def test_unknown_or_no_formulas_are_explained():
    with pytest.raises(LabError, match="no formula 'nope'"):
        views.verdicts(Case(formulas=("nope",)))
    with pytest.raises(LabError, match="at least one formula"):
        views.verdicts(Case(formulas=()))


def test_element_checks_refuse_huge_inputs_before_building_them(no_inputs):
    with pytest.raises(LabError, match="up to 262,144 elements"):
        views.gradient_report(Case(shape=(4096, 4096)), "corrected")


def test_memory_guard_refuses_before_allocating(no_inputs, monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "16")
    with pytest.raises(LabError, match="more than the budget of 16.0 MiB"):
        views.surface(Case(shape=(4096, 4096)), views.PlaneSpec(), 201, 1.0)
    with pytest.raises(LabError, match="budget"):
        views.training(Case(shape=(4096, 4096)), views.PlaneSpec(), "SGD", 0.1, 2000)
    with pytest.raises(LabError, match="budget"):
        views.field(Case(shape=(4096, 4096)), views.PlaneSpec(), 41, 1.0)


def test_refusing_a_huge_setting_keeps_peak_memory_low():
    """2000 steps at 4096×4096 would keep ~1.5 TB of positions; refusing it allocates next to nothing."""
    from pathlib import Path

    status = Path("/proc/self/status")
    if not status.exists():
        pytest.skip("needs Linux's /proc to read the peak resident memory")

    def kib(field):
        return next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith(field + ":"))

    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current size
    before = kib("VmRSS")
    for refuse in (lambda: views.training(Case(shape=(4096, 4096)), views.PlaneSpec(), "SGD", 0.1, 2000),
                   lambda: views.surface(Case(shape=(4096, 4096), dtype="float32"), views.PlaneSpec(), 201, 1.0),
                   lambda: views.field(Case(shape=(4096, 4096)), views.PlaneSpec(), 41, 1.0)):
        with pytest.raises(LabError):
            refuse()
    assert kib("VmHWM") - before < 32 * 1024  # well under one 4096×4096 input (128 MiB)


def test_device_difference_on_the_cpu_is_zero():
    diff = views.device_difference(Case(shape=(3, 4)), "corrected", "cpu")
    assert diff.max_difference == {"x1": 0.0, "x2": 0.0}
    assert diff.verdict_cpu == diff.verdict_device


def test_landscape_views_return_plain_results():
    case = Case(shape=(1, 2))
    spec = views.PlaneSpec(mode="input plane")
    surface = views.surface(case, spec, 11, 1.0)
    assert surface.loss.shape == (11, 11)
    field = views.field(case, spec, 5, 1.0)
    assert set(field.directions) == {"tutorial", "corrected"}
    runs = views.training(case, spec, "Adam", 0.05, 5)
    assert set(runs.runs) == {"tutorial", "corrected"}


def test_conformance_and_sweep_views():
    checks = views.conformance(Case(shape=(3, 4), params=(("dim", -1), ("eps", 1e-8))), "corrected")
    assert all(c.status == "pass" for c in checks), [(c.name, c.message) for c in checks if c.status != "pass"]
    sweep = views.gradient_sweep(Case(shape=(3, 4)), "corrected")
    assert set(sweep.errors) == {"float32", "float64"}


def test_work_guard_refuses_what_would_freeze_the_page():
    with pytest.raises(LabError, match="element evaluations, more than the limit"):
        views.surface(Case(shape=(2048, 2048)), views.PlaneSpec(), 51, 1.0)
    with pytest.raises(LabError, match="up to 4,096"):
        views.conformance(Case(shape=(64, 128)), "corrected")


def test_work_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_WORK_LIMIT", "1000")
    with pytest.raises(LabError, match="Finite differences would take"):
        views.gradient_report(Case(shape=(8, 16)), "corrected")
    with pytest.raises(LabError, match="optimizer steps"):
        views.training(Case(shape=(8, 16)), views.PlaneSpec(), "SGD", 0.1, 100)


def test_the_upstream_gradient_shows_a_bug_that_the_loss_hides():
    """Layernorm without the variance term: invisible in the all-ones product, visible in a random one;
    the verdict sees it whatever is drawn."""
    ar = ("analytic", "reference")
    ones = views.gradient_report(Case(family="layernorm", formulas=("variance-ignored",), upstream="ones"), "variance-ignored")
    random = views.gradient_report(Case(family="layernorm", formulas=("variance-ignored",), upstream="random"), "variance-ignored")
    assert ones.input("x").errors[ar].max_abs < 1e-9 < 1e-3 < random.input("x").errors[ar].max_abs
    assert ones.upstream == "ones" and random.upstream == "random"
    assert not ones.verdict.passed and not random.verdict.passed


def test_an_unknown_upstream_is_explained():
    with pytest.raises(LabError, match="Unknown upstream gradient"):
        views.gradient_report(Case(upstream="sideways"), "corrected")


def test_contract_problems_name_broken_rules_not_a_formula_that_raises():
    from gradient_lab.app.case import Case

    case = Case(shape=(3, 4, 5), params=(("dim", 1),))  # the tutorial's backward raises on 3-D inputs with dim=1
    assert views.contract_problems(case) == {}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_below_float64_pytorchs_checks_and_the_contract_lint_raise_no_false_alarm(dtype):
    for family in ("softmax", "layernorm", "logsumexp"):
        case = Case(family=family, formulas=("corrected",), dtype=dtype)
        checks = views.conformance(case, "corrected")  # gradcheck needs float64: run on the dtype's values, upcast
        assert checks and all(c.status != "fail" for c in checks), [(c.name, c.message) for c in checks if c.status == "fail"]
        assert views.contract_problems(case) == {}
    broken = views.conformance(Case(family="softmax", formulas=("no-subtract",), dtype=dtype), "no-subtract")
    assert any(c.status == "fail" for c in broken)  # and a wrong backward still fails them


def test_the_first_verdict_shown_early_is_kept_for_the_whole_report(monkeypatch):
    from gradient_lab.engine import pipeline

    fresh, calls = pipeline.first_order, []
    monkeypatch.setattr(pipeline, "first_order", lambda *a, **k: calls.append(1) or fresh(*a, **k))
    monkeypatch.setattr(views, "first_order", pipeline.first_order)
    case = Case(seed=11, shape=(3, 4))
    early = views.first_verdict(case, "corrected")
    assert early.pending and not early.stages and early.verdict.passed and len(calls) == 1
    whole = views.gradient_report(case, "corrected")
    assert whole.pending == () and whole.conditions is not None and whole.verdict.passed
    kept = len(calls) - 1  # the conditions' changed problems alone
    calls.clear()
    # kept once: asked again (a cache that was cleared), the report is made from scratch, the same
    again = views.gradient_report(case, "corrected")
    assert len(calls) == kept + 1 and again.verdict.coverage == whole.verdict.coverage


def test_a_kernels_writes_are_named_in_its_report_card_and_anatomy_and_break_no_rule_that_fails_it():
    from gradient_lab import declare
    from gradient_lab.present.cards import kernel_line
    from tests.registry import families_kept
    from tests.specimens.kernels import SquareInFloat32, SquareWritingIntoSaved, square

    with families_kept():
        declare("kernel writer", {"writer": SquareWritingIntoSaved, "clean": SquareInFloat32}, reference=square, kernel=True)
        case = Case(family="kernel writer", formulas=("writer", "clean"), shape=(3, 4))
        report = views.gradient_report(case, "writer")
        assert report.verdict.passed  # its gradient is right
        (saved, twice) = report.kernel.writes
        assert (saved.target, twice.target) == ("saved tensor", "a second backward")
        assert saved.element in kernel_line(report)  # the card's words come from the same write
        notes = {b.rule: b for b in views.anatomy(case, "writer", timed=False).broken if b.severity == "note"}
        assert saved.element in notes["saved tensors are not written in place"].message and "backward can run twice" in notes
        assert views.contract_problems(case) == {}  # named, never a broken rule that fails the check
        assert views.gradient_report(case, "clean").kernel.writes == ()


@pytest.mark.parametrize("order, severity", [(1, "note"), (2, "error")])
def test_a_backward_that_cannot_be_differentiated_again_breaks_no_rule_asked_where_first_order_is_declared(order, severity):
    from gradient_lab import declare
    from tests.registry import families_kept
    from tests.specimens.contracts import Detached

    with families_kept():
        declare("detached product", {"detached": Detached}, reference=lambda x, y: x * y, inputs=("x", "y"), order=order)
        case = Case(family="detached product", formulas=("detached",), shape=(3, 4))
        (rule,) = [b for b in views.anatomy(case, "detached", timed=False).broken if b.rule == "a differentiable backward"]
        assert rule.severity == severity  # the Anatomy page's banner and the command line's contract line agree
        assert bool(views.contract_problems(case)) is (order == 2)


def test_under_triton_s_interpreter_slow_gradcheck_is_left_to_the_verdict_and_the_other_checks_run():
    pytest.importorskip("triton")
    from tests.registry import families_kept

    from gradient_lab import declare

    with families_kept():
        from tests.specimens import triton_kernels as k  # imported once per process: its families declared here, as a test's

        declare("a triton rmsnorm", {"right": k.RMSNorm}, reference=k.rmsnorm_reference, inputs=("x", "w"), build_inputs=k.input_and_weight,
                kernel=True, batch_dims=(0, None))
        checks = {c.name: c for c in views.conformance(Case(family="a triton rmsnorm", formulas=("right",), shape=(4, 24)), "right")}
    slow = next(c for name, c in checks.items() if "slow" in name)
    assert slow.status == "skipped" and f"slow_limit={views.INTERPRETED_SLOW_LIMIT}" in slow.message
    assert checks["gradcheck (fast)"].status == "pass", checks["gradcheck (fast)"].message  # and the other checks run
