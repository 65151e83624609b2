"""Who listens to every ``assert_gradients_match``: called with (report, order, the Function's name)
after each check. The pytest plugin's ``--gradient-report`` listens here. A module of its own, with
no imports, so that loading the plugin costs nothing until a check runs (``testing.OBSERVERS`` is
this list)."""

from __future__ import annotations

from typing import Any, Callable

OBSERVERS: list[Callable[[Any, int, str], None]] = []
