"""The page's frame: page setup, the navigation that carries the case from page to page, and
the sidebar that builds the Case. Every widget has a key and is bound to the URL, so a link
reproduces the view."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import pandas  # noqa: F401 - imported whole before any session: a half-imported pandas breaks plotly in another session
import streamlit as st

from ..app import plugins
from ..app.case import DTYPES, Case, default_formulas
from ..engine.pipeline import UPSTREAMS
from ..app.devices import available_devices, device_problem
from ..app.family import Family, families
from ..explore.perturb import ALIGNMENTS, INJECTIONS, Perturbation
from ..present.guide import PRESENT, STORY, TUTORIAL, story_step
from . import show
from .compute import forget_all

MAX_ROWS, MAX_FEATURES, MAX_DEPTH = 4096, 4096, 64
URL: Final = "query-params"  # streamlit's bind: every widget's value kept in the URL
# the presentation setting: larger text everywhere, for a room to read from the back
PRESENTATION_STYLE = "<style>html { font-size: 20px; } [data-testid='stMarkdownContainer'] p { font-size: 1.15rem; }</style>"
PAGE_PREFIXES = ("home_", "check_", "field_", "surface_", "lab_", "train_", "anatomy_")  # a page's own widgets: the rest is the case


@dataclass(frozen=True)
class NavPage:
    path: str  # relative to app.py
    label: str
    icon: str


PAGES = (
    NavPage("app.py", "Home", ":material/home:"),
    NavPage("pages/1_Gradient_check.py", "Gradient check", ":material/rule:"),
    NavPage("pages/2_Gradient_field.py", "Gradient field", ":material/open_with:"),
    NavPage("pages/3_Loss_surface.py", "Loss surface", ":material/landscape:"),
    NavPage("pages/4_Perturbation_lab.py", "Perturbation lab", ":material/science:"),
    NavPage("pages/5_Training.py", "Training", ":material/trending_down:"),
    NavPage("pages/6_Anatomy.py", "Anatomy", ":material/account_tree:"),
)
_PAGE_SETTINGS = "_page_settings"  # session state: each page's own settings, as the URL last held them
_CURRENT_PAGE = "_current_page"  # session state: the page the last run drew
_LAST_CASE = "_last_case"  # session state: the case as the last run's address held it
_RETRIED = "_retried"  # session state: this page was just opened once more to restore its address
_DROPPED = "_dropped"  # session state: numbers of the link that no widget could take
_OPENING = "_opening"  # session state: (page, query) a button asked to open, before any widget binds the address


def open_case(page: str, query: dict[str, str | list[str]]) -> None:
    """A button's callback: open ``page`` at exactly the case ``query`` gives (defaults for the
    rest), as its pasted link would. The sidebar's widgets forget their values, so that the
    address sets them, and the switch happens at the next run's start, before any widget binds
    the address: on the way out the old page's widgets still bind it, so the page is opened first
    and takes the case there (Streamlit refuses to set a bound parameter, and a clicked page_link
    drops them)."""
    for key in [*st.session_state.get(_LAST_CASE, {}), *query]:
        st.session_state.pop(key, None)
    st.session_state[_LAST_CASE] = {key: value if isinstance(value, list) else [value] for key, value in query.items()}
    st.session_state[_OPENING] = (page, query)


def page_setup(page: str, title: str, explanation: str) -> Case:
    """Every page starts here: page config, the navigation, title, its one-line explanation,
    the sidebar's Case. ``page`` is the page's file, relative to app.py."""
    presenting = show.presenting()  # read before any widget: it sets up the page itself
    st.set_page_config(page_title=f"{title} · Gradient Lab", page_icon="∇", layout="wide",
                       initial_sidebar_state="collapsed" if presenting else "auto")
    opening = st.session_state.get(_OPENING)
    if opening is not None:  # leave for the page first (its address then binds nothing), and there take the case
        target, query = opening
        if page != target:
            st.switch_page(target)
        del st.session_state[_OPENING]
        st.switch_page(target, query_params=query)
    if presenting:
        st.html(PRESENTATION_STYLE)
    st.title(title)
    st.caption(explanation)
    link = {k: st.query_params[k] for k in st.query_params}  # as the link gave them, before any widget reads them
    drop_unreadable_numbers(page)
    link.update(st.session_state.pop(_DROPPED, {}))  # what the first opening dropped, for the note
    remember_page_settings(page)
    if _arrived(page):
        restore_address(page)
    with st.sidebar:
        navigation = st.container()
        case = sidebar_case()
    st.session_state[_LAST_CASE] = _case_query()
    with navigation:
        draw_navigation()
    notes = link_notes(link)
    if notes:
        st.info("Ignored from the link: " + "; ".join(notes) + ".", icon="🔗")
    story_banner(page)
    return case


def _log_choices(low: int, high: int) -> list[float]:
    return [10.0**e for e in range(low, high + 1)]


NUMBER_KEYS = ("rows", "features", "depth", "seed", "near_zero", "inject_count")  # the sidebar's number inputs
NUMBER_PREFIXES = ("param_",)  # a family's own numeric params
LARGEST_NUMBER = 2.0**53  # beyond it a float no longer holds every integer


def _readable(value: str | None) -> bool:
    if value is None:
        return False
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return math.isfinite(number) and abs(number) <= LARGEST_NUMBER


def drop_unreadable_numbers(page: str) -> None:
    """Open the page again without any number its widget cannot take (inf, nan, 1e309, an
    integer beyond 2^53, an empty value), before any widget reads the address: Streamlit's own
    binding raises on some of them (OverflowError on seed=1e309). The link note then names them."""
    query = _query()
    unreadable = {k: v[-1] for k, v in query.items()
                  if (k in NUMBER_KEYS or k.startswith(NUMBER_PREFIXES)) and not _readable(v[-1] if v else None)}
    if unreadable:
        st.session_state[_DROPPED] = unreadable
        st.switch_page(page, query_params={k: v for k, v in query.items() if k not in unreadable})


def _query() -> dict[str, list[str]]:
    return {key: st.query_params.get_all(key) for key in st.query_params}


def _case_query() -> dict[str, list[str]]:
    """The case as the address holds it: every sidebar setting, not a page's own nor a step's banner (it stays on its page)."""
    return {k: v for k, v in _query().items() if not k.startswith(PAGE_PREFIXES) and k != STORY}


def _arrived(page: str) -> bool:
    """Whether this run opens ``page`` coming from another page of this session."""
    arrived = st.session_state.get(_CURRENT_PAGE) not in (None, page)
    st.session_state[_CURRENT_PAGE] = page
    return arrived


def remember_page_settings(page: str) -> None:
    """Keep this page's own settings (its prefixed widgets, as the URL holds them), so that a
    link back to it in this session brings them back."""
    own = {k: v for k, v in _query().items() if k.startswith(PAGE_PREFIXES)}
    st.session_state.setdefault(_PAGE_SETTINGS, {})[page] = own


def page_query(page: str) -> dict[str, list[str]]:
    """The address of ``page`` from here: the case (every sidebar setting in the URL) and the
    page's own settings from the last visit in this session."""
    return {**_case_query(), **st.session_state.get(_PAGE_SETTINGS, {}).get(page, {})}


def draw_navigation() -> None:
    """Links to every page that carry the case, so moving between pages keeps it (Streamlit's
    own sidebar links drop the query parameters, and it names the home page after its file)."""
    for page in PAGES:
        query = page_query(page.path)
        st.page_link(page.path, label=page.label, icon=page.icon, query_params=query or None)
    st.divider()


def link_notes(link: dict[str, str]) -> list[str]:
    """What a link asked for that was not taken: unknown parameters, and sidebar values that were
    not valid (Streamlit leaves the widget at its default and drops them from the URL). Values
    are shown as code, shortened: never rendered as markdown or HTML."""
    def shown(text: str) -> str:
        text = text.replace("`", "'").replace("\n", " ")
        return f"`{text[:40]}{'…' if len(text) > 40 else ''}`"

    notes = []
    for key, value in link.items():
        if key == STORY:
            continue
        if key not in st.session_state and not key.startswith(PAGE_PREFIXES):
            notes.append(f"{shown(key)} is not a setting of Gradient Lab")
        elif key == "device" and value and (problem := device_problem(value)):  # an absent device: said once, and the page runs on the CPU
            notes.append(f"{shown(key)}={shown(value)}: {problem.rstrip('.')}, so it runs on the CPU")
        elif key in st.session_state and key not in st.query_params and _url_form(st.session_state[key]) != value:
            notes.append(f"{shown(key)}={shown(value)} is not a valid value here")
    return notes


def _url_form(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value).lower() if isinstance(value, bool) else str(value)


def restore_address(page: str) -> None:
    """Arriving at a page, the address must hold the case. Streamlit drops the case's
    parameters on the first page switch of a session (later ones keep them), so a page that
    arrives without them is opened once more with the case the last page's address held,
    before any widget binds them."""
    last = st.session_state.get(_LAST_CASE, {})
    if st.session_state.pop(_RETRIED, False) or all(key in st.query_params for key in last):
        return
    st.session_state[_RETRIED] = True
    own = st.session_state.get(_PAGE_SETTINGS, {}).get(page, {})
    st.switch_page(page, query_params={**last, **own, **_query()})  # what the address itself asks for wins (a Start-here step's case)


def sidebar_case() -> Case:
    for result in plugins.ensure_loaded():  # the server's own --functions / GRADIENT_LAB_FUNCTIONS, again where edited
        if result.reloaded:
            forget_all()
            st.toast(f"Reloaded your functions from `{result.source}`: its file changed, so every verdict is computed afresh.",
                     icon=":material/refresh:")
        if result.error:
            st.error(f"Could not load your functions from `{result.source}`: {result.error}", icon="⚠️")
    known = families()
    st.header("Case")
    family = known[st.selectbox("Family", list(known), key="family", bind=URL, help=" · ".join(f"{n}: {f.title}" for n, f in known.items()))]
    formulas = st.multiselect("Formulas to compare", list(family.formulas), default=default_formulas(family),
                              key=f"formulas_{family.name}", bind=URL,
                              help="Each formula is a custom autograd.Function; the reference is autograd through PyTorch's own ops.")

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
    broadcast = (st.checkbox(f"Broadcast {family.input_names[1]} (size 1 off dim)", False, key="broadcast", bind=URL)
                 if family.broadcast and len(family.input_names) > 1 else False)

    st.subheader("Numbers")
    dtype = st.selectbox("dtype", list(DTYPES), key="dtype", bind=URL, help="float64 for checking correctness; lower precisions are perturbations to look at.")
    # plain option labels: the URL carries the label, so it must not depend on this machine
    problems = available_devices()  # an absent device is said once, never offered
    absent = [d for d, problem in problems.items() if problem]
    device = st.selectbox("Device", [d for d, problem in problems.items() if not problem], key="device", bind=URL,
                          help="Absent here: " + " · ".join(f"{d} ({problems[d]})" for d in absent) if absent else None)
    if absent:
        st.caption(f"Not on this machine: {', '.join(d.upper() for d in absent)}.")
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
    steps: list[float | str] = ["auto", *_log_choices(-12, -1)]
    step = st.select_slider("Finite-difference step h", steps, value="auto", key="step", bind=URL,
                            format_func=lambda v: "auto (by dtype)" if v == "auto" else f"{v:.0e}")

    with st.expander("Perturbations", expanded=False):
        perturbation = perturbation_controls(family)
    st.toggle("Presentation: larger text, sidebar closed", False, key=PRESENT, bind=URL,
              help="For a lecture or a demo; a link with present=true opens any page this way.")
    return Case(
        family=family.name, formulas=tuple(formulas), shape=shape, dtype=dtype, device=device, seed=int(seed),
        broadcast=bool(broadcast), params=tuple(sorted(params.items())), step=None if step == "auto" else float(step),
        perturbation=perturbation, upstream=upstream,
    )




def perturbation_controls(family: Family) -> Perturbation:
    """The perturbations that act on ``family``, its inputs named as it names them: the second
    input's only with two inputs, near-zero rows only with an eps (they sit at a multiple of it)."""
    first, second = family.input_names[0], (family.input_names[1] if len(family.input_names) > 1 else None)
    norms = [0.0] + _log_choices(-6, 4)
    as_drawn = lambda v: "as drawn" if v == 0 else f"{v:g}"  # noqa: E731
    has_eps = "eps" in family.params
    return Perturbation(
        noise1=st.slider(f"Noise on {first} (σ)", 0.0, 2.0, 0.0, 0.01, key="noise1", bind=URL),
        noise2=st.slider(f"Noise on {second} (σ)", 0.0, 2.0, 0.0, 0.01, key="noise2", bind=URL) if second else 0.0,
        norm1=st.select_slider(f"Row norm of {first}", norms, value=0.0, key="norm1", bind=URL, format_func=as_drawn, help="1 = unit norm."),
        norm2=st.select_slider(f"Row norm of {second}", norms, value=0.0, key="norm2", bind=URL, format_func=as_drawn) if second else 0.0,
        near_zero_rows=st.number_input(f"Rows of {first} near zero", 0, MAX_ROWS, 0, key="near_zero", bind=URL) if has_eps else 0,
        near_zero_factor=st.select_slider("… at norm (× eps)", [0.1, 0.5, 1.0, 2.0, 10.0], value=1.0, key="near_zero_factor", bind=URL) if has_eps else 1.0,
        align=st.selectbox(f"{second} along {first}", ALIGNMENTS, key="align", bind=URL) if second else "none",
        align_angle=st.slider("… within (degrees)", 0.0, 90.0, 1.0, 0.5, key="align_angle", bind=URL) if second else 1.0,
        inject=st.selectbox(f"Inject into {first}", INJECTIONS, key="inject", bind=URL),
        inject_count=st.number_input("… at how many elements", 1, 1000, 1, key="inject_count", bind=URL),
    )


def story_banner(page: str) -> None:
    """Where a Start-here step opened this page: which step of the four, what to look at, and the
    next one."""
    found = story_step(st.query_params.get(STORY), page)
    if found is None:
        return
    number, step = found
    presenting = show.presenting()
    with st.container(border=True, key="story_banner"):
        words, after = st.columns([4, 1], vertical_alignment="center")
        words.markdown(f":material/school: **Step {number} of {len(TUTORIAL)}: {step.title.split('. ', 1)[1]}.** {step.what_to_see}")
        if number < len(TUTORIAL):
            following = TUTORIAL[number]
            after.button("Next step", key="story_next", icon=":material/arrow_forward:", type="tertiary", help=following.title,
                         on_click=open_case, args=(following.page, following.query_params(presenting)))
        else:
            after.page_link("app.py", label="Back to Home", icon=":material/home:")
