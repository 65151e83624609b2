"""The browser harness's assumptions about Streamlit, checked without a browser."""

from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from tests.e2e import harness


def test_the_run_counter_reads_script_finished_where_streamlit_sends_it():
    """RUN_COUNTER counts varint field 6 of each ForwardMsg with the values 0 and 3."""
    field = ForwardMsg.DESCRIPTOR.fields_by_name["script_finished"]
    assert field.number == 6 and field.type == field.TYPE_ENUM
    statuses = ForwardMsg.ScriptFinishedStatus
    assert statuses.Value("FINISHED_SUCCESSFULLY") == 0
    assert statuses.Value("FINISHED_FRAGMENT_RUN_SUCCESSFULLY") == 3
    assert statuses.Value("FINISHED_EARLY_FOR_RERUN") == 2  # not counted: the run was cut short
    assert "field === 6 && (value === 0 || value === 3)" in harness.RUN_COUNTER
    message = ForwardMsg(script_finished=statuses.Value("FINISHED_SUCCESSFULLY")).SerializeToString()
    assert bytes([6 << 3 | 0, 0]) in message  # a top-level varint field 6, as the counter parses it


def test_deep_links_and_query_strings():
    assert harness.deep_link("http://h:1", "gradient_field", rows=1, features=2) == "http://h:1/Gradient_field?rows=1&features=2"
    assert harness.deep_link("http://h:1", "home") == "http://h:1/"
    assert harness.query_of("http://h:1/Training?train_steps=51&rows=4") == {"train_steps": "51", "rows": "4"}


def test_load_sessions_differ_and_never_walk_onto_a_default():
    sessions = harness.load_sessions(8)
    assert len({(s.page, tuple(sorted(s.query.items()))) for s in sessions}) == 8
    assert len({s.query["seed"] for s in sessions}) == 8  # each its own seed: a leak would show
    defaults = {"field_resolution": 15, "train_steps": 200, "surface_resolution": 51}
    for s in sessions:
        if s.slider and s.slider[0] in defaults:
            start = int(s.query[s.slider[0]])
            assert not start + s.slider[1] <= defaults[s.slider[0]] <= start + s.slider[2]
