"""Hostile links: unknown keys, wrong types, huge or negative numbers, markup. Ignored with a note,
never executed, never rendered as HTML, and the page still works."""

import pytest

from tests.pages.conftest import app

HOSTILE = [
    ({"rows": "-5"}, "`rows`=`-5` is not a valid value"),
    ({"rows": "abc"}, "`rows`=`abc` is not a valid value"),
    ({"features": "99999999999999"}, "`features`=`99999999999999` is not a valid value"),
    ({"eps": "nan"}, "`eps`=`nan` is not a valid value"),
    ({"dtype": "<script>alert(1)</script>"}, "`dtype`=`<script>alert(1)</script>` is not a valid value"),
    ({"family": "../../etc/passwd"}, "`family`=`../../etc/passwd` is not a valid value"),
    ({"formulas_cosine": "[x](javascript:alert(1))"}, "`formulas_cosine`=`[x](javascript:alert(1))` is not a valid value"),
    ({"__import__('os')": "1"}, "`__import__('os')` is not a setting"),
    ({"zzz": "x" * 500}, "`zzz` is not a setting"),
]


@pytest.mark.parametrize("query, note", HOSTILE)
def test_hostile_link_is_ignored_with_a_note_and_the_page_works(query, note):
    at = app(**query)
    assert not at.exception
    said = " ".join(i.value for i in at.info)
    assert note in said
    assert at.table and list(at.table[0].value["formula"]) == ["tutorial", "sign-fixed", "corrected"]
    assert at.number_input(key="rows").value == 8  # defaults stand


def test_long_values_are_shortened_and_backticks_cannot_break_out():
    at = app(zzz="`**bold**`", dtype="a`b" * 40)
    said = " ".join(i.value for i in at.info)
    assert "**bold**" not in said  # an unknown key's value is not echoed at all
    assert "`a'ba'b" in said and "…`" in said  # backticks replaced: the value cannot leave its code span
    assert "a'b" * 21 not in said  # shortened to 40 characters


def test_a_valid_link_gets_no_note():
    at = app(rows="4", dtype="float32", check_formula="corrected")
    assert not at.exception and not at.info


def test_no_markup_is_ever_rendered_unsafely():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sources = [p for p in [root / "app.py", *root.glob("pages/*.py"), *root.glob("lib/**/*.py")]]
    assert not [str(p) for p in sources if "unsafe_allow_html" in p.read_text()]


@pytest.mark.parametrize("key, value", [("seed", "1e309"), ("rows", "inf"), ("features", "nan"), ("seed", "99999999999999999999999"),
                                        ("depth", "")])
def test_a_number_no_widget_can_take_is_dropped_with_a_note(key, value):
    at = app(**{key: value, "features": "5"} if key != "features" else {key: value})
    assert not at.exception
    assert at.number_input(key=key).value == {"seed": 0, "rows": 8, "features": 16, "depth": 0}[key]  # the default
    notes = " ".join(i.value for i in at.info)
    assert "Ignored from the link" in notes and f"`{key}`" in notes
