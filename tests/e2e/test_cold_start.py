"""A cold server: several sessions open at once before anything has been imported."""

import pytest

from tests.e2e import harness

pytestmark = pytest.mark.e2e


# a race on a cold server, fixed by importing pandas whole in lib/ui.py before any session: one
# session's st.dataframe imported pandas while another's plotly figure saw it half-initialised
def test_sessions_opened_at_once_on_a_cold_server(browser):
    with harness.streamlit_server() as url:
        sessions = [s for s in harness.load_sessions(8) if s.name in ("field A", "field B", "training A", "training B")]
        result = harness.run_load(url, sessions, harness.Workload(changes=0))  # open, wait, check
        assert result.problems == []
        assert result.healthy_after
