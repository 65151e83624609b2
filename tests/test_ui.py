"""lib/ui helpers that need no running page: downloads' text and default choices."""

import json
import math

import numpy as np

from lib.family import get_family
from lib.ui.downloads import _plain, csv_text
from lib.ui.sidebar import default_formulas


def test_csv_text_has_a_header_and_a_row_per_dict():
    text = csv_text([{"formula": "tutorial", "error": 1.5}, {"formula": "corrected", "error": 0.0}])
    assert text.splitlines() == ["formula,error", "tutorial,1.5", "corrected,0.0"]
    assert csv_text([]) == ""


def test_plain_makes_json_safe_values():
    data = _plain({"a": np.array([1.0, math.nan]), "b": np.float32(2.5), "c": (np.int64(3), math.inf)})
    assert json.loads(json.dumps(data)) == {"a": [1.0, "nan"], "b": 2.5, "c": [3, "inf"]}


def test_default_formulas_are_two_wrong_and_every_correct_one():
    assert default_formulas(get_family("cosine")) == ["tutorial", "sign-fixed", "corrected"]
