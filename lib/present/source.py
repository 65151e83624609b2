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
    if target is None:
        return None
    try:
        return textwrap.dedent(inspect.getsource(target)).rstrip() + "\n"
    except (OSError, TypeError):
        return None


def backward_diff(wrong: Formula, right: Formula) -> str | None:
    """A unified diff from the buggy formula's backward to the correct one's: the fix, its removed
    lines (drawn red) the bug's, its added ones (green) the correct code. None when either source
    cannot be read or they are the same."""
    a, b = backward_source(wrong), backward_source(right)
    if a is None or b is None or a == b:
        return None
    lines = difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                 fromfile=f"{wrong.name} (buggy)", tofile=f"{right.name} (correct)", n=3)
    return "".join(lines)
