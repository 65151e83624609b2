"""What a user waits for when they choose bfloat16 on Gradient check: the whole report of the
corrected cosine at the sidebar's default shape (the float64 verdict on the bfloat16 values, then
the precision verdict with its 128 fresh draws for the tolerances), for a seed the cache has not
seen, best of N; beside it the same report in float64 (what the precision stage adds). The last
line is the bfloat16 report's seconds."""

from gradient_lab.app import views
from gradient_lab.app.case import Case
from benchmarks.timing import best_seconds

REPEATS = 5


def report_seconds(dtype: str) -> float:
    seeds = iter(range(100, 100 + REPEATS))  # a fresh seed each time: nothing cached
    return best_seconds(lambda: views.gradient_report(Case(family="cosine", formulas=("corrected",), dtype=dtype, seed=next(seeds)),
                                                      "corrected"), REPEATS)


if __name__ == "__main__":
    views.gradient_report(Case(family="cosine", formulas=("corrected",), dtype="bfloat16"), "corrected")  # imports, first calls
    float64, bfloat16 = report_seconds("float64"), report_seconds("bfloat16")
    print(f"float64_report_s={float64:.3f}")
    print(f"precision_share={1 - float64 / bfloat16:.2f}")  # of the bfloat16 report's time
    print(f"bfloat16_report_s={bfloat16:.3f}")
