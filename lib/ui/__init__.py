"""The only part of lib that imports streamlit, one job per module: the page's frame and the
sidebar (``sidebar``), cached computations and messages (``compute``), showing verdicts and
charts (``show``), downloads (``downloads``), the plane controls (``planes``). Pages use
them through this package: ``ui.page_setup``, ``ui.compute``, ``ui.chart``, …"""

from lib.ui.compute import compute, guard
from lib.ui.downloads import download
from lib.ui.planes import plane_controls
from lib.ui.show import badge, chart, sentence, verdict_box
from lib.ui.sidebar import URL, page_setup

__all__ = ["URL", "badge", "chart", "compute", "download", "guard", "page_setup", "plane_controls", "sentence", "verdict_box"]
