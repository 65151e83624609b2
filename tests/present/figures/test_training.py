"""Training summaries: one row per formula, and what happened in words."""

import math

import numpy as np

from gradient_lab.present.figures.training import STATUSES, outcome, training_summary
from gradient_lab.explore.trajectory import Trajectory, TrajectorySet


def run(formula, loss, *, diverged=None, problem=None, cosine=1.0):
    loss = np.asarray(loss, dtype=float)
    steps = loss.size - 1
    norms = np.ones(steps)
    if problem:
        norms[2:] = np.nan
    return Trajectory(formula, loss, np.full(steps, cosine), norms, np.zeros((loss.size, 2)), diverged, problem)


def runs(*trajectories):
    return TrajectorySet("SGD", 0.1, 4, {t.formula: t for t in trajectories}, {}, (math.nan, math.nan), (), ("a", "b"))


def test_each_outcome_in_words():
    assert outcome(run("c", [1.0, 0.5, 0.2, 0.1, 0.05])) == ("descends", "the loss goes down by 0.95")
    status, words = outcome(run("t", [1.0, 1.2, 1.5, 1.7, 1.9], cosine=-1.0))
    assert status == "climbs" and "goes up by 0.9" in words and "points uphill" in words
    # uphill until it blows up: the direction is the cause, not the step (no "smaller learning rate")
    status, words = outcome(run("t", [1.0, 1.5, 3.0, np.nan, np.nan], diverged=2, cosine=-1.0))
    assert status == "climbs" and "blows up at step 2" in words and "learning rate" not in words
    status, words = outcome(run("t", [1.0, 1.5, 3.0, np.nan, np.nan], diverged=2))
    assert status == "diverged" and "diverged at step 2" in words and "gone up by 2" in words and "smaller learning rate" in words
    status, words = outcome(run("t", [1.0, 1.0, 1.0, np.nan, np.nan], problem="RuntimeError: sizes"))
    assert status == "raised" and "raised at step 2" in words and "RuntimeError: sizes" in words
    assert outcome(run("s", [1.0, 1.0, 1.0, 1.0, 1.0]))[0] == "stays"


def test_summary_rows_per_formula():
    rows = training_summary(runs(run("tutorial", [1.0, 1.2, 1.5, 1.7, 1.9], cosine=-0.5), run("corrected", [1.0, 0.5, 0.2, 0.1, 0.05])))
    assert [r["formula"] for r in rows] == ["tutorial", "corrected"]
    tutorial, corrected = rows
    assert tutorial["status"] == "climbs" and abs(tutorial["loss change"] - 0.9) < 1e-12
    assert tutorial["mean cosine to true gradient"] == -0.5 and tutorial["final loss"] == 1.9 and tutorial["start loss"] == 1.0
    assert corrected["status"] == "descends" and corrected["final loss"] == 0.05
    assert all(r["status"] in STATUSES for r in rows)
