"""Start here: the tutorial's story as a guided path, each step a page and the case that shows it,
so a teacher can click through it in a lecture. Plain data; ``lib.ui.guide`` draws it as links.

The story (``shared/reference/cosine_tutorial.md``): the tutorial's backward of cosine similarity
has its sign flipped and misses the normalisation 1/(‖x1‖·‖x2‖). The sign shows at once, as a field
that points uphill and training that climbs; the missing normalisation only where row norms are
far from 1; the corrected formula passes on every entry.
"""

from __future__ import annotations

from dataclasses import dataclass

PRESENT = "present"  # the link parameter (and the sidebar's toggle) that turns the presentation setting on
STORY = "story"  # the link parameter that names the step of the story a page is showing (its banner)


@dataclass(frozen=True)
class Step:
    title: str
    what_to_see: str
    page: str  # relative to app.py
    query: tuple[tuple[str, str | tuple[str, ...]], ...]  # the case, as the sidebar's URL parameters

    def query_params(self, present: bool = False) -> dict[str, str | list[str]]:
        params = {key: list(value) if isinstance(value, tuple) else value for key, value in self.query}
        params[STORY] = str(TUTORIAL.index(self) + 1)
        return {**params, PRESENT: "true"} if present else params


def story_step(number: str | None, page: str) -> tuple[int, Step] | None:
    """The step a link's ``story`` parameter names, where ``page`` is that step's page."""
    if number is None or not number.isdigit() or not 1 <= int(number) <= len(TUTORIAL):
        return None
    step = TUTORIAL[int(number) - 1]
    return (int(number), step) if step.page == page else None


TUTORIAL = (
    Step("1. Flipped sign", "On one row's own plane (two features), the tutorial's arrows point uphill, against the corrected "
         "formula's: its gradient has the wrong sign.",
         "pages/2_Gradient_field.py", (("family", "cosine"), ("formulas_cosine", ("tutorial", "corrected")), ("rows", "1"),
                                       ("features", "2"))),
    Step("2. Training climbs", "Followed downhill, the tutorial's gradient makes the loss rise while the corrected one's falls.",
         "pages/5_Training.py", (("family", "cosine"), ("formulas_cosine", ("tutorial", "corrected")))),
    Step("3. Missing norm", "With the sign fixed, the gradient still lacks its normalisation 1/(‖x1‖·‖x2‖): hidden near unit norm, "
         "it makes the gradient hundreds of times too large at row norm 10.", "pages/1_Gradient_check.py",
         (("family", "cosine"), ("formulas_cosine", ("sign-fixed",)), ("norm1", "10"), ("norm2", "10"))),
    Step("4. The fix", "The corrected backward agrees with autograd on every Jacobian entry, and in double backward.",
         "pages/1_Gradient_check.py", (("family", "cosine"), ("formulas_cosine", ("corrected",)))),
)
