"""The dashboard's server, warmed: ``python -m gradient_lab.ui.serve [streamlit options]`` is
``streamlit run app.py [options]`` in this process, after importing what every page imports and
checking the home page's default case once. Streamlit runs a page's script only when someone
opens it, so a plain ``streamlit run`` makes its first visitor wait for torch's import and its
first kernels (seconds on a small machine); here the server answers its health check only once
that is done, and the first visit costs what any other does. ``make run`` and ``gradient-lab app``
start it this way."""

from __future__ import annotations

import sys
import time


def warm() -> float:
    """Import the pages' modules and check the default case (nothing cached: the kernels and
    lazy imports warmed); seconds taken."""
    start = time.perf_counter()
    import plotly.graph_objects  # noqa: F401 - every other page draws with it

    from .. import ui  # noqa: F401 - torch, streamlit's elements, the sidebar
    from ..app import views
    from ..app.case import Case
    from ..present import cards  # noqa: F401

    case = Case()
    views.verdicts(case)
    views.contract_problems(case)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    from streamlit.web import cli

    from ..cli import dashboard

    argv = sys.argv[1:] if argv is None else argv
    seconds = warm()
    print(f"Gradient Lab: warmed in {seconds:.1f} s", file=sys.stderr, flush=True)
    return cli.main(["run", str(dashboard() / "app.py"), *argv], standalone_mode=False) or 0


if __name__ == "__main__":
    sys.exit(main())
