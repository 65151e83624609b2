"""Sessions are isolated: what one sets, caches or mutates does not reach another."""

from gradient_lab.app import views
from gradient_lab.ui.compute import cached
from gradient_lab.app.case import Case
from tests.pages.conftest import app


def test_two_sessions_keep_their_own_settings():
    first, second = app(), app()
    first.number_input(key="rows").set_value(3).run()
    first.selectbox(key="dtype").set_value("float32").run()
    second.run()
    assert second.number_input(key="rows").value == 8 and second.selectbox(key="dtype").value == "float64"
    assert first.number_input(key="rows").value == 3
    assert list(second.table[0].value["formula"]) == list(first.table[0].value["formula"])
    second.multiselect(key="formulas_cosine").set_value(["corrected"]).run()
    first.run()
    assert list(first.table[0].value["formula"]) == ["tutorial", "sign-fixed", "corrected"]


def test_cached_results_are_copies_so_one_session_cannot_change_anothers():
    case = Case(shape=(3, 4))
    mine = cached(views.gradient_report)(case, "corrected")
    mine.inputs[0].gradients["analytic"][:] = 123.0  # a careless page mutating its result
    theirs = cached(views.gradient_report)(case, "corrected")
    assert theirs is not mine
    assert (theirs.inputs[0].gradients["analytic"] != 123.0).all()
    assert theirs.verdict.passed and views.gradient_report is not None
