"""The server's safe defaults stay in place."""

import tomllib
from pathlib import Path

CONFIG = tomllib.loads((Path(__file__).resolve().parents[1] / ".streamlit" / "config.toml").read_text())


def test_usage_statistics_off_and_xsrf_on():
    assert CONFIG["browser"]["gatherUsageStats"] is False
    assert CONFIG["server"]["enableXsrfProtection"] is True


def test_local_only_by_default_and_error_details_configurable():
    assert CONFIG["server"]["address"] == "localhost"
    assert CONFIG["client"]["showErrorDetails"] in ("full", "stacktrace", "type", "none")
