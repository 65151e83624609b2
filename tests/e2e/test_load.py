"""A short version of benchmarks/bench_load.py: four browser sessions at once on one server, two
pairs on the same page with different settings, each changing its own slider and select for
8 seconds. No error shows, every session keeps its own settings (widgets and URL), the server
stays up."""

import pytest

from tests.e2e import harness

pytestmark = pytest.mark.e2e

SECONDS = 8.0


def test_sessions_keep_their_own_settings_under_load(app_url):
    sessions = [s for s in harness.load_sessions(8) if s.name in ("field A", "field B", "training A", "training B")]
    result = harness.run_load(app_url, sessions, SECONDS)
    assert result.problems == []
    assert result.healthy_after, "the server stopped answering /_stcore/health"
    for session in sessions:
        assert session.changes >= 2, f"{session.name} managed only {session.changes} changes in {SECONDS} s"
        assert set(session.expected) == {k for k in (session.slider[0], session.select[0])}
