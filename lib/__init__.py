"""Gradient Lab: see, and test, hand-written PyTorch gradients.

The public API is what this module exports; every other module is internal and may change:

    from gradient_lab import assert_gradients_match, check_gradients, declare

- ``assert_gradients_match(function, inputs, reference=None, *, order=1, ...)``: raise
  ``AssertionError`` (with a message written for a CI log) unless ``function``'s backward matches the
  truth on every Jacobian entry; returns the report.
- ``check_gradients(function, inputs, ...)``: the report without asserting.
- ``declare(name, formulas, ...)``: register a family of your Functions for the dashboard and the
  ``gradient-lab check`` command.

The names are loaded on first use, so ``import gradient_lab`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.23.0"
__all__ = ["assert_gradients_match", "check_gradients", "declare"]

if TYPE_CHECKING:
    from .app.family import declare
    from .testing import assert_gradients_match, check_gradients

_WHERE = {"assert_gradients_match": ".testing", "check_gradients": ".testing", "declare": ".app.family"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
