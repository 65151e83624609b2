"""What a user waits for after changing a setting: every page's rerun after a change the cache
cannot answer, with AppTest (the script run on the server, no browser).

For every page, at defaults and at a heavy case (64×128 inputs, a 201×201 surface), one session:
a warm-up run, then REPEATS rounds of
  1. a sidebar change: a seed never used before (every computation misses the cache);
  2. the page's own main control, switched to its other value (a miss: the seed is new);
  3. a rerun with nothing changed (the cache answers), for comparison.
Each figure is the median over the rounds (max in brackets). Prints a line per page and case,
Home's first verdict card after a sidebar change (``home_first_card_uncached_ms=F``: the time until
the page drew it), ``slowest_heavy_uncached_rerun_ms=H``, and last ``slowest_uncached_rerun_ms=T``
(the defaults: every page whole, Home's every card). Targets: F <= 300 ms, T <= 1000 ms, H <= 1500 ms.

    .venv/bin/python benchmarks/bench_app.py [--repeats 5] [--only home training ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"rows": "64", "features": "128"}
# page -> (file, the heavy case's own settings, (kind, key, other value at defaults, at the heavy case) of
# its main control); the control swings between its starting value and the other one
PAGES = {
    "home": ("app.py", {}, ("selectbox", "upstream", "ones", "ones")),
    "gradient_check": ("pages/1_Gradient_check.py", {}, ("selectbox", "check_formula", "corrected", "corrected")),
    "gradient_field": ("pages/2_Gradient_field.py", {}, ("slider", "field_resolution", 13, 13)),
    "loss_surface": ("pages/3_Loss_surface.py", {"surface_resolution": "201"}, ("slider", "surface_resolution", 41, 181)),
    "perturbation_lab": ("pages/4_Perturbation_lab.py", {}, ("selectbox", "lab_kind", None, None)),
    "training": ("pages/5_Training.py", {}, ("slider", "train_steps", 190, 190)),
    "anatomy": ("pages/6_Anatomy.py", {}, ("selectbox", "anatomy_formula", "corrected", "corrected")),
}
REPEATS = 5
FIRST_CARD: list[float] = []  # per timed run: when its first verdict card was drawn (its end where none was)


def _widget(at: AppTest, kind: str, key: str):
    return getattr(at, kind)(key=key)


CARDS: list[float] = []  # when each verdict card of the run being timed was drawn (AppTest runs the page in this process)


def _count_cards() -> None:
    from gradient_lab import ui

    draw = ui.verdict_card

    def drawn(*args, **kwargs):
        CARDS.append(time.perf_counter())
        return draw(*args, **kwargs)

    ui.verdict_card = drawn


def _timed(at: AppTest) -> float:
    CARDS.clear()
    start = time.perf_counter()
    at.run()
    elapsed = (time.perf_counter() - start) * 1e3
    FIRST_CARD.append((CARDS[0] - start) * 1e3 if CARDS else elapsed)
    # a page that refused or crashed (gradient_lab.ui.guard's messages) did not do the work being timed; a failing verdict did
    problems = list(at.exception) + [e for e in at.error if e.icon in ("⚠️", "🛑")]
    if problems:
        raise SystemExit(f"the page shows an error: {problems[0].value}")
    return elapsed


def measure(page: str, heavy: bool, repeats: int) -> dict[str, list[float]]:
    """Per kind of rerun ("sidebar", "control", "cached"), the times of ``repeats`` rounds."""
    path, heavy_settings, (kind, key, at_defaults, at_heavy) = PAGES[page]
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)  # the entrypoint, as in the real app
    for name, value in ({**HEAVY, **heavy_settings} if heavy else {}).items():
        at.query_params[name] = value
    if path != "app.py":
        at.switch_page(path)
    _timed(at)
    widget = _widget(at, kind, key)
    b = widget.value
    a = at_heavy if heavy else at_defaults
    if a is None:  # a select whose options the page decides: the next one
        a = next(o for o in widget.options if o != str(b))
    times: dict[str, list[float]] = {"sidebar": [], "control": [], "cached": [], "first card": []}
    for round_ in range(repeats):
        at.number_input(key="seed").set_value(1000 + round_)
        times["sidebar"].append(_timed(at))
        times["first card"].append(FIRST_CARD[-1])
        _widget(at, kind, key).set_value(a if round_ % 2 == 0 else b)
        times["control"].append(_timed(at))
        times["cached"].append(_timed(at))
    return times


def _figure(values: list[float]) -> str:
    return f"{statistics.median(values):5.0f} ms (max {max(values):5.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--only", nargs="*", choices=list(PAGES), help="some pages only")
    args = parser.parse_args()
    _count_cards()
    slowest = {False: 0.0, True: 0.0}
    first_card = None
    for page in args.only or PAGES:
        for heavy in (False, True):
            times = measure(page, heavy, args.repeats)
            uncached = max(statistics.median(times["sidebar"]), statistics.median(times["control"]))
            slowest[heavy] = max(slowest[heavy], uncached)
            print(f"{page:<17} {'heavy' if heavy else 'default':<8} sidebar change {_figure(times['sidebar'])}  "
                  f"{PAGES[page][2][1]} change {_figure(times['control'])}  cached rerun {_figure(times['cached'])}", flush=True)
            if page == "home" and not heavy:
                first_card = statistics.median(times["first card"])
                print(f"home              default  first verdict card after a sidebar change {_figure(times['first card'])}", flush=True)
    print(f"slowest_heavy_uncached_rerun_ms={slowest[True]:.0f}")
    if first_card is not None:
        print(f"home_first_card_uncached_ms={first_card:.0f}")
    print(f"slowest_uncached_rerun_ms={slowest[False]:.0f}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
