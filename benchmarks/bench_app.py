"""Full reruns of every page with AppTest: the median after one warm-up run, at default settings
and at a heavy setting (64×128 inputs, a 201×201 surface). Prints a line per page and last
``slowest_default_rerun_ms=T``. Targets: T <= 300 at defaults, every heavy rerun <= 1500 ms.

    .venv/bin/python benchmarks/bench_app.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"rows": "64", "features": "128"}
HEAVY_PER_PAGE = {  # page-specific controls of the heavy setting
    "3_Loss_surface.py": {"surface_resolution": "201"},
}
REPEATS = 5


def rerun_ms(page: Path, query: dict[str, str]) -> tuple[float, float]:
    """(first run, median rerun) in ms of a fresh session of ``page`` opened with ``query``."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)  # the entrypoint, as in the real app
    for key, value in query.items():
        at.query_params[key] = value
    if page.name != "app.py":
        at.switch_page(str(page.relative_to(ROOT)))
    start = time.perf_counter()
    at.run()
    first = (time.perf_counter() - start) * 1e3
    if at.exception:
        raise SystemExit(f"{page.name} raised: {at.exception[0].value}")
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        at.run()
        times.append((time.perf_counter() - start) * 1e3)
    return first, statistics.median(times)


def main() -> None:
    pages = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]
    slowest_default, slowest_heavy = 0.0, 0.0
    for page in pages:
        first, default = rerun_ms(page, {})
        heavy_first, heavy = rerun_ms(page, {**HEAVY, **HEAVY_PER_PAGE.get(page.name, {})})
        slowest_default, slowest_heavy = max(slowest_default, default), max(slowest_heavy, heavy)
        print(f"{page.name}: default rerun {default:.0f} ms (first run {first:.0f} ms); "
              f"heavy rerun {heavy:.0f} ms (first run {heavy_first:.0f} ms)")
    print(f"slowest heavy rerun: {slowest_heavy:.0f} ms")
    print(f"slowest_default_rerun_ms={slowest_default:.0f}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
