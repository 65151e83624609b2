"""Sessions keep their own settings under load: four browser sessions at once on one server, two
pairs on the same page with different settings, each making the same fixed number of changes (a step of
its own slider, a pick of its select) and waiting for every rerun to finish (up to a minute each).

Correctness only, without a clock: no error shows, every session ends with its own settings in its
widgets and in its address, nothing leaked from another session, the server stays up. How many
changes a second the server manages is a throughput figure: benchmarks/bench_load.py prints it."""

import pytest

from tests.e2e import harness

pytestmark = pytest.mark.e2e

CHANGES = 2  # a slider step and a pick of the select each
PER_CHANGE_MS = 60_000


def test_sessions_keep_their_own_settings_under_load(app_url):
    sessions = [s for s in harness.load_sessions(8) if s.name in ("field A", "field B", "training A", "training B")]
    result = harness.run_load(app_url, sessions, harness.Workload(changes=CHANGES), timeout=PER_CHANGE_MS)
    assert result.problems == []
    assert result.healthy_after, "the server stopped answering /_stcore/health"
    for session in sessions:
        assert session.changes == CHANGES, f"{session.name} finished {session.changes} of {CHANGES} changes"
        assert set(session.expected) == {session.slider[0], session.select[0]}


def test_a_workload_is_either_changes_or_seconds():
    assert harness.Workload(changes=3).describe() == "3 changes each"
    assert harness.Workload(seconds=2.5).describe() == "2.5 s each"
    with pytest.raises(ValueError):
        harness.Workload()
    with pytest.raises(ValueError):
        harness.Workload(changes=3, seconds=1.0)
