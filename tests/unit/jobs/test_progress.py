"""Progress lines of long jobs: the capacity search reports every tenth of its step cap (the
step, and how many starts still climb), the null jobs after each kind and null, the sensitivity
table after each alternative; a job's progress reaches the console only once it has run a while
(headgeom.core.logs), so the many short jobs of a small run stay quiet."""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import numpy as np

from headgeom.core import logs
from headgeom.methods.paper1.capacity import feasible_capacity_batch, projected_ascent


def _problem(n=3, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X0 = rng.standard_normal((n, d, d))
    sigma = np.linalg.svd(X0, compute_uv=False)
    D = np.abs(rng.standard_normal((n, d))) + 0.1
    return X0, D, sigma


def test_capacity_progress_every_tenth_of_the_cap_and_numbers_unchanged():
    X0, D, sigma = _problem()
    calls = []
    X1, P1 = projected_ascent(X0, D, sigma, 40, stats={"progress": lambda *a: calls.append(a)})
    X2, P2 = projected_ascent(X0, D, sigma, 40)
    assert np.array_equal(P1, P2) and np.array_equal(X1, X2)  # reporting moves no number
    steps = [c[0] for c in calls]
    assert steps == list(range(4, 40, 4))[: len(steps)] and len(steps) >= 5
    assert all(c[1] == 40 and c[3] == 3 and 0 < c[2] <= 3 for c in calls)


def test_capacity_progress_reaches_through_the_batched_search():
    X0, D, sigma = _problem(1)
    K = X0[0]
    calls = []
    st = {"progress": lambda *a: calls.append(a)}
    feasible_capacity_batch(K[None], D[:1], "m", 0, [0], 2, 20, stats=st)
    assert calls and all(c[1] == 20 and c[3] == 2 for c in calls)
    assert st["svd"] > 0


def test_progress_lines_reach_the_console_only_after_a_while(tmp_path, monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", err)
    clock = [100.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: clock[0])
    out, keep = sys.stdout, sys.stderr
    try:
        log = logs.to_log(SimpleNamespace(log=[str(tmp_path / "job.log")]))
        log.progress("early")  # before CONSOLE_EVERY_S: the log only
        clock[0] += logs.CONSOLE_EVERY_S
        log.progress("late")
        clock[0] += 1
        log.progress("too soon after")
        logs.progress_of(log)("via progress_of")
    finally:
        sys.stdout, sys.stderr = out, keep
    assert err.getvalue().splitlines() == ["late"]
    assert (tmp_path / "job.log").read_text().splitlines() == ["early", "late", "too soon after", "via progress_of"]
    assert logs.progress_of(print) is print
