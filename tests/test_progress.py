"""Progress reports reach a listener only while it listens."""

from gradient_lab.progress import listening, report


def test_reports_reach_the_listener_clamped_and_stop_after():
    heard = []
    report(0.5)  # nobody listens: nothing happens
    with listening(heard.append):
        report(0.25)
        report(1.5)
    report(0.75)
    assert heard == [0.25, 1.0]
