"""The one module of lib that imports streamlit: page setup, the sidebar that builds the Case,
cached computations with progress, error messages in words, charts and downloads.

Every widget has a key and is bound to the URL, so a link reproduces the view.
"""

from __future__ import annotations

import csv
import io
import json
import math
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas  # noqa: F401 - imported whole before any session: a half-imported pandas breaks plotly in another session
import streamlit as st

from lib import plugins, views
from lib.case import DTYPES, Case
from lib.compare import UPSTREAMS
from lib.devices import DEVICES, device_problem
from lib.errors import LabError
from lib.family import Family, families
from lib.perturb import ALIGNMENTS, INJECTIONS, Perturbation
from lib.progress import listening

try:  # Streamlit's own flag for "inside a cached function"; internal, so optional
    from streamlit.runtime.scriptrunner_utils.script_run_context import in_cached_function
except ImportError:  # pragma: no cover
    in_cached_function = None

URL = "query-params"
MAX_ROWS, MAX_FEATURES, MAX_DEPTH = 4096, 4096, 64


# ---- page setup and the sidebar ----------------------------------------------------------------------


def page_setup(title: str, explanation: str) -> Case:
    """Every page starts here: page config, title, its one-line explanation, the sidebar's Case."""
    st.set_page_config(page_title=f"{title} · Gradient Lab", page_icon="∇", layout="wide")
    st.title(title)
    st.caption(explanation)
    link = {k: st.query_params.get(k) for k in st.query_params}  # as the link gave them, before any widget reads them
    with st.sidebar:
        case = sidebar_case()
    notes = link_notes(link)
    if notes:
        st.info("Ignored from the link: " + "; ".join(notes) + ".", icon="🔗")
    return case


def default_formulas(family: Family) -> list[str]:
    """Up to two wrong formulas and every correct one: enough to compare without clutter."""
    wrong = [n for n, f in family.formulas.items() if not f.correct][:2]
    return wrong + [n for n, f in family.formulas.items() if f.correct]


def _log_choices(low: int, high: int) -> list[float]:
    return [10.0**e for e in range(low, high + 1)]


PAGE_PREFIXES = ("check_", "field_", "surface_", "lab_", "train_")  # page widgets: Streamlit checks their values


def link_notes(link: dict[str, str]) -> list[str]:
    """What a link asked for that was not taken: unknown parameters, and sidebar values that were
    not valid (Streamlit leaves the widget at its default and drops them from the URL). Values
    are shown as code, shortened: never rendered as markdown or HTML."""
    def shown(text: str) -> str:
        text = text.replace("`", "'").replace("\n", " ")
        return f"`{text[:40]}{'…' if len(text) > 40 else ''}`"

    notes = []
    for key, value in link.items():
        if key not in st.session_state and not key.startswith(PAGE_PREFIXES):
            notes.append(f"{shown(key)} is not a setting of Gradient Lab")
        elif key in st.session_state and key not in st.query_params and _url_form(st.session_state[key]) != value:
            notes.append(f"{shown(key)}={shown(value)} is not a valid value here")
    return notes


def _url_form(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value).lower() if isinstance(value, bool) else str(value)


def sidebar_case() -> Case:
    for result in plugins.ensure_loaded():  # the server's own --functions / GRADIENT_LAB_FUNCTIONS
        if result.error:
            st.error(f"Could not load your functions from `{result.source}`: {result.error}", icon="⚠️")
    known = families()
    st.header("Case")
    family = known[st.selectbox("Family", list(known), key="family", bind=URL, help=" · ".join(f"{n}: {f.title}" for n, f in known.items()))]
    formulas = st.multiselect("Formulas to compare", list(family.formulas), default=default_formulas(family),
                              key=f"formulas_{family.name}", bind=URL, help="Each formula is a custom autograd.Function; the reference is autograd through PyTorch's own ops.")

    st.subheader("Shape")
    rows = st.number_input("Rows (batch)", 1, MAX_ROWS, 8, key="rows", bind=URL)
    features = st.number_input("Features", 1, MAX_FEATURES, 16, key="features", bind=URL)
    depth = st.number_input("Extra dim (0 = none)", 0, MAX_DEPTH, 0, key="depth", bind=URL, help="A third dim: inputs of shape (rows, features, extra).")
    shape = (int(rows), int(features)) + ((int(depth),) if depth else ())
    params: dict[str, float | int] = {}
    if "dim" in family.params:
        options = list(range(-len(shape), len(shape)))
        default = int(family.params["dim"]) if int(family.params["dim"]) in options else options[-1]
        params["dim"] = st.selectbox("dim (reduced over)", options, index=options.index(default), key="dim", bind=URL)
    broadcast = st.checkbox("Broadcast input 2 (size 1 off dim)", False, key="broadcast", bind=URL) if len(family.input_names) > 1 else False

    st.subheader("Numbers")
    dtype = st.selectbox("dtype", list(DTYPES), key="dtype", bind=URL, help="float64 for checking correctness; lower precisions are perturbations to look at.")
    # plain option labels: the URL carries the label, so it must not depend on this machine
    device = st.selectbox("Device", list(DEVICES), key="device", bind=URL,
                          help=" · ".join(f"{d}: {device_problem(d) or 'available'}" for d in DEVICES))
    if device_problem(device):
        st.caption(f"⚠ {device} is unavailable here: {device_problem(device)}")
    seed = st.number_input("Seed", 0, 2**31 - 1, 0, key="seed", bind=URL)
    upstream = st.selectbox("Upstream gradient (drawn)", UPSTREAMS, key="upstream", bind=URL,
                            help="What the drawn gradients are the product of: the loss's gradient (what training sees), all ones, "
                                 "or random (seeded): a backward that ignores or mixes grad_output shows in the maps. "
                                 "The verdict checks every Jacobian entry whatever is drawn.")
    if "eps" in family.params:
        params["eps"] = st.select_slider("eps (norm clamp)", [0.0] + _log_choices(-12, 1), value=float(family.params["eps"]), key="eps", bind=URL,
                                         format_func=lambda v: "0" if v == 0 else f"{v:.0e}")
    for name, value in family.params.items():  # any other family parameter, generically
        if name not in ("dim", "eps"):
            params[name] = st.number_input(name, value=value, key=f"param_{name}", bind=URL)
    step = st.select_slider("Finite-difference step h", ["auto"] + _log_choices(-12, -1), value="auto", key="step", bind=URL,
                            format_func=lambda v: "auto (by dtype)" if v == "auto" else f"{v:.0e}")

    with st.expander("Perturbations", expanded=False):
        perturbation = Perturbation(
            noise1=st.slider("Noise on input 1 (σ)", 0.0, 2.0, 0.0, 0.01, key="noise1", bind=URL),
            noise2=st.slider("Noise on input 2 (σ)", 0.0, 2.0, 0.0, 0.01, key="noise2", bind=URL) if len(family.input_names) > 1 else 0.0,
            norm1=st.select_slider("Row norm of input 1", [0.0] + _log_choices(-6, 4), value=0.0, key="norm1", bind=URL,
                                   format_func=lambda v: "as drawn" if v == 0 else f"{v:g}", help="1 = unit norm: where the sign-fixed tutorial is right."),
            norm2=st.select_slider("Row norm of input 2", [0.0] + _log_choices(-6, 4), value=0.0, key="norm2", bind=URL,
                                   format_func=lambda v: "as drawn" if v == 0 else f"{v:g}") if len(family.input_names) > 1 else 0.0,
            near_zero_rows=st.number_input("Rows of input 1 near zero", 0, MAX_ROWS, 0, key="near_zero", bind=URL),
            near_zero_factor=st.select_slider("… at norm (× eps)", [0.1, 0.5, 1.0, 2.0, 10.0], value=1.0, key="near_zero_factor", bind=URL),
            align=st.selectbox("Input 2 along input 1", ALIGNMENTS, key="align", bind=URL) if len(family.input_names) > 1 else "none",
            align_angle=st.slider("… within (degrees)", 0.0, 90.0, 1.0, 0.5, key="align_angle", bind=URL),
            inject=st.selectbox("Inject into input 1", INJECTIONS, key="inject", bind=URL),
            inject_count=st.number_input("… at how many elements", 1, 1000, 1, key="inject_count", bind=URL),
        )
    return Case(
        family=family.name, formulas=tuple(formulas), shape=shape, dtype=dtype, device=device, seed=int(seed),
        broadcast=bool(broadcast), params=tuple(sorted(params.items())), step=None if step == "auto" else float(step),
        perturbation=perturbation, upstream=upstream,
    )


# ---- computing, with cache, progress and messages --------------------------------------------------


@st.cache_data(max_entries=256, show_spinner=False)
def _cached(name: str, *args: Any) -> Any:
    return getattr(views, name)(*args)


def _progress(bar, what: str) -> Callable[[float], None]:
    """Moves ``bar`` from inside a cached call without recording the update in the cached
    result (a replayed update would point at a bar that no longer exists)."""

    def update(fraction: float) -> None:
        if in_cached_function is None:  # this Streamlit keeps no such flag: nothing to hide
            bar.progress(fraction, text=what)
            return
        token = in_cached_function.set(False)
        try:
            bar.progress(fraction, text=what)
        finally:
            in_cached_function.reset(token)

    return update


def compute(fn: Callable[..., Any], *args: Any, what: str = "Computing…") -> Any | None:
    """``fn(*args)`` from ``lib.views``, cached by its plain arguments, with a spinner and a
    progress bar; a LabError or any failure becomes a message on the page and None."""
    with guard(what.rstrip("…")):
        bar = st.empty()
        with st.spinner(what), listening(_progress(bar, what)):
            result = _cached(fn.__name__, *args)
        bar.empty()
        return result
    return None


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Whatever fails inside is said in words on the page, and the rest of the page goes on."""
    try:
        yield
    except LabError as error:
        st.error(str(error), icon="⚠️")
    except Exception as error:  # noqa: BLE001 - never a traceback on the page
        frame = traceback.extract_tb(error.__traceback__)[-1]
        st.error(f"{what} failed: {type(error).__name__}: {error} (in {frame.name}, {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})", icon="🛑")


BADGES = {"pass": ":green-badge[pass]", "fail": ":red-badge[fail]", "no verdict": ":orange-badge[no verdict]",
          "not differentiable": ":red-badge[not differentiable]", "not checked": ":gray-badge[not checked]"}


def badge(outcome: str) -> str:
    return BADGES.get(outcome, f":gray-badge[{outcome}]")


def sentence(summary: str) -> str:
    """A verdict's summary without its leading outcome word ("passes: …"), safe as markdown."""
    return summary.split(": ", 1)[-1].replace("*", "\\*").replace("_", "\\_")


def verdict_box(text: str, outcome: str) -> None:
    """A verdict as a coloured box: green for pass, red for a failure, amber when no verdict."""
    if outcome == "pass":
        st.success(text, icon=":material/check_circle:")
    elif outcome in ("no verdict", "not checked"):
        st.warning(text, icon=":material/help:")
    else:
        st.error(text, icon=":material/cancel:")


def chart(fig, key: str) -> None:
    st.plotly_chart(fig, width="stretch", key=key)


# ---- downloads ---------------------------------------------------------------------------------------


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


# ---- the plane through the inputs (gradient field and loss surface pages) -----------------------------

PLANE_SPANS = [0.25, 0.5, 1.0, 2.0, 4.0]
PLANE_HELP = ("random: two Gaussian directions scaled to each row's norm · gradient: the descent direction and one "
              "orthogonal to it · coordinates: two chosen elements of the input · input plane: the actual plane of one "
              "row (needs feature size 2)")


def plane_controls(prefix: str, case: Case, sizes: Sequence[int], columns: Sequence) -> tuple[views.PlaneSpec, float]:
    """The plane's widgets in five given columns (mode, moving input, two extras, span), keyed
    ``<prefix>_...``; returns the plane and the view's half-width."""
    from lib.landscape import PLANE_MODES

    plane_col, input_col, extra_a, extra_b, span_col = columns
    names = case.get_family().input_names
    default_mode = "input plane" if case.shape[-1] == 2 else "random"
    mode = plane_col.selectbox("Plane", PLANE_MODES, index=PLANE_MODES.index(default_mode), key=f"{prefix}_plane", bind=URL, help=PLANE_HELP)
    index = names.index(input_col.selectbox("Input that moves", names, key=f"{prefix}_input", bind=URL, help="The other inputs stay where they are."))
    size = sizes[index] if index < len(sizes) else 0
    seed, coordinates, row = 0, (0, 1), 0
    if mode in ("random", "gradient"):
        seed = int(extra_a.number_input("Plane seed", 0, 2**31 - 1, 0, key=f"{prefix}_plane_seed", bind=URL, help="Draws the random direction(s)."))
    elif mode == "coordinates":
        where = f"A flat index into {names[index]}: 0 … {max(size - 1, 0)}."
        coordinates = (int(extra_a.number_input("Coordinate a", 0, None, 0, key=f"{prefix}_coord_a", bind=URL, help=where)),
                       int(extra_b.number_input("Coordinate b", 0, None, 1, key=f"{prefix}_coord_b", bind=URL, help=where)))
    else:
        row = int(extra_a.number_input("Row", 0, None, 0, key=f"{prefix}_row", bind=URL,
                                       help=f"Which row's two features span the plane: 0 … {max(size // 2 - 1, 0)}."))
    span = span_col.select_slider("View half-width (±)", PLANE_SPANS, value=1.0, key=f"{prefix}_span", bind=URL, format_func=lambda v: f"{v:g}",
                                  help="How far the view reaches from the current point, in the plane's own units.")
    if mode == "input plane" and case.shape[-1] != 2:
        st.caption(f"The input plane needs feature size 2 (this case has {case.shape[-1]}): set Features to 2 in the sidebar, or pick another plane.")
    return views.PlaneSpec(mode=mode, index=int(index), seed=seed, coordinates=coordinates, row=row), span
