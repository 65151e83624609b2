"""Families declared by a test do not outlive it, through gradient_lab.app.family's public functions."""

from contextlib import contextmanager
from typing import Iterator, Mapping

from gradient_lab.app.family import Family, families, register, unregister


def restore(before: Mapping[str, Family]) -> None:
    """Make the registry hold ``before`` again (a ``families()`` taken earlier): families added
    since are unregistered, those replaced or removed registered again."""
    for name in list(families()):
        if name not in before:
            unregister(name)
    for name, family in before.items():
        if families().get(name) is not family:
            register(family)
    now = families()
    assert now.keys() == before.keys() and all(now[name] is before[name] for name in now), "the registry was not restored"


@contextmanager
def families_kept() -> Iterator[dict[str, Family]]:
    """The registry as it was on entry (built-in families imported first), restored on exit."""
    before = families()
    try:
        yield before
    finally:
        restore(before)
