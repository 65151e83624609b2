"""Download buttons: rows as CSV, dicts as JSON (NaN and Inf as strings), text as it is."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Callable, Sequence

import numpy as np
import streamlit as st



def _plain(value: Any) -> Any:
    """JSON-safe: numpy to lists and floats, NaN and Inf to strings."""
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def csv_text(rows: Sequence[dict]) -> str:
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out.getvalue()


MIME = {".csv": "text/csv", ".json": "application/json", ".py": "text/x-python"}


def file_text(data: Sequence[dict] | dict | str) -> str:
    """Text as given, a dict as JSON, rows (a list of dicts) as CSV."""
    if isinstance(data, str):
        return data
    if isinstance(data, dict):
        return json.dumps(_plain(data), indent=1)
    return csv_text(data)


def download(label: str, data: Sequence[dict] | dict | str | Callable[[], Any], file_name: str, key: str) -> None:
    """A download button; ``data`` may be a callable, then the file is built only when clicked."""
    content = (lambda: file_text(data())) if callable(data) else file_text(data)
    mime = next((m for ext, m in MIME.items() if file_name.endswith(ext)), "text/plain")
    st.download_button(label, content, file_name, mime, key=key)


