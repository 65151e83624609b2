"""The dashboard's server, warmed: ``python -m gradient_lab.ui.serve [streamlit options]`` is
``streamlit run app.py [options]`` in this process, after importing what every page imports and
checking the home page's default case into the pages' cache. Streamlit runs a page's script only
when someone opens it, so a plain ``streamlit run`` makes its first visitor wait for torch's import,
its first kernels and the verdicts (seconds on a small machine); here the server answers its
health check only once that is done, and the first visit at defaults is answered from the cache. ``make run`` and ``gradient-lab app``
start it this way."""

from __future__ import annotations

import sys
import time


def _warm_recorder() -> None:
    """The NaN recorder's first TorchDispatchMode costs a second in a process: paid here, not by the
    first user whose gradient is not finite."""
    import torch

    from ..engine.provenance import trace_non_finite

    trace_non_finite(lambda x: 1 / x, [torch.zeros(2, dtype=torch.float64)], order=1)


def warm() -> float:
    """Import what every page imports, pay Streamlit's own first-run costs, and check Home's
    default case into the cache the pages read (``compute.cached``), so the first visitor at
    defaults is answered from it; seconds taken."""
    start = time.perf_counter()
    import logging

    import plotly.graph_objects  # noqa: F401 - every other page draws with it
    import streamlit.emojis  # noqa: F401 - set_page_config's icon check compiles its regex on import (0.7 s)
    from streamlit import delta_generator

    from .. import ui  # noqa: F401 - torch, streamlit's elements, the sidebar
    from ..app import views
    from ..app.case import opening_case
    from ..present import cards  # noqa: F401
    from .compute import cached

    # Streamlit's first element checks once whether it runs in a REPL, by inspect.stack() over
    # every module (0.3 s); it only warns when outside `streamlit run`, which this is not
    delta_generator._use_warning_has_been_displayed = True
    caching = logging.getLogger("streamlit.runtime.caching.cache_data_api")
    level, caching.level = caching.level, logging.ERROR  # "no runtime yet": the cache is kept all the same
    try:
        case = opening_case()  # what Home is first asked, through the same cached calls
        for formula in cached(views.chosen_formulas)(case):
            cached(views.first_verdict)(case, formula)  # as Home asks: the first order shown early, the whole report from it
            cached(views.gradient_report)(case, formula)
        cached(views.contract_problems)(case)
        _warm_recorder()
    finally:
        caching.level = level
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
