"""The only part of lib that imports streamlit, one job per module: the page's frame and the
sidebar (``sidebar``), cached computations and messages (``compute``), showing verdicts and
charts (``show``), downloads (``downloads``), the plane controls (``planes``). Pages use
them through this package: ``ui.page_setup``, ``ui.compute``, ``ui.chart``, …"""

import torch

# The server runs each session's script in a thread of its own, so parallelism comes from the
# sessions; torch's intra-op threads on top only fight them and anything else on the machine
# (a batched cosine of 128×64×128 took 48 ms with 2 threads beside another busy process, 5 ms
# with 1). On a quiet machine two threads are faster for one big computation (3.5 ms against
# 5.2 ms for that cosine): a single user's heavy surface pays for the server's steadiness.
torch.set_num_threads(1)

from .compute import compute, guard  # noqa: E402 - after set_num_threads, before anything of torch's runs
from .cards import card_slots, verdict_card  # noqa: E402
from .downloads import download  # noqa: E402
from .guide import start_here  # noqa: E402
from .planes import plane_controls  # noqa: E402
from .show import badge, chart, sentence  # noqa: E402
from .sidebar import URL, page_setup  # noqa: E402

__all__ = ["URL", "badge", "card_slots", "chart", "compute", "download", "guard", "page_setup", "plane_controls", "sentence", "start_here", "verdict_card"]
