"""The code a user wrote: a formula's ``backward`` as source, and how a buggy one differs from
the correct one, as a unified diff. That diff, next to the verdict, is the shortest way to a bug."""

from __future__ import annotations

import difflib
import inspect
import textwrap


from ..app.family import Formula
from ..engine.signature import function_class


def backward_source(formula: Formula) -> str | None:
    """The formula's ``backward`` (its Function's), or the callable itself, as source; None when
    Python cannot find it (a function built at run time, say)."""
    cls = function_class(formula.function)
    target = getattr(cls, "backward", None) if cls is not None else formula.function
    try:
        return textwrap.dedent(inspect.getsource(target)).rstrip() + "\n"
    except (OSError, TypeError):
        return None


def backward_diff(wrong: Formula, right: Formula) -> str | None:
    """A unified diff from the correct formula's backward to the buggy one's: the lines the bug
    changed. None when either source cannot be read or they are the same."""
    a, b = backward_source(right), backward_source(wrong)
    if a is None or b is None or a == b:
        return None
    lines = difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                 fromfile=f"{right.name} (correct)", tofile=f"{wrong.name}", n=3)
    return "".join(lines)
