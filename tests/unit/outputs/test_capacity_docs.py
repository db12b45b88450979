"""The capacity search's settings as docs/methods.md §1.7 and docs/costs.md state them are the ones
config/paper.yaml and config/config.yaml run (so the documents cannot drift from the configs again),
the routes and stopping rules §1.7 describes are the code's (the L-BFGS stop measured on the code),
and each number §1.7 gives about the optimizer is the one bench/capacity_optimizer.py prints."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import yaml

from headgeom.methods import closure
from headgeom.methods.paper1 import capacity as C

ROOT = Path(__file__).resolve().parents[3]
METHODS = " ".join((ROOT / "docs" / "methods.md").read_text().split(" "))  # line breaks kept for sections
COSTS = " ".join((ROOT / "docs" / "costs.md").read_text().split())
ROUTE = {"lbfgs": "L-BFGS", "gradient": "gradient"}


def _capacity(name):
    text = (ROOT / "config" / name).read_text()
    cap = yaml.safe_load(text)["paper1"]["capacity"]
    block = text[text.index("  capacity:"):]
    cap["tol_text"] = re.search(r"^\s+tol:\s*(\S+)", block, re.M).group(1)  # as written in the file
    return cap


def _section(title):
    """A section of methods.md, its whitespace runs made single spaces."""
    i = METHODS.index(title)
    return " ".join(METHODS[i:METHODS.index("\n### ", i + 1)].split())


def test_methods_states_paper_yamls_capacity_settings():
    cap = _capacity("paper.yaml")
    s17 = _section("### §1.7")
    wanted = (f"`method: {cap['method']}`, `iters: {cap['iters']}`, `tol: {cap['tol_text']}`, "
              f"`window: {cap['window']}`, `restarts: {cap['restarts']}`")
    assert wanted in s17, wanted
    assert "8 × 300" not in s17  # the step count paper.yaml no longer runs


def test_methods_states_make_runs_capacity_settings():
    cap = _capacity("config.yaml")
    wanted = (f"runs `{cap['method']}`, {cap['restarts']} restarts, {cap['iters']} steps, tol {cap['tol_text']} "
              f"over {cap['window']} steps")
    assert wanted in _section("### §1.7"), wanted


def test_costs_rows_name_the_configs_capacity_settings():
    for name, how in (("paper.yaml", "at most "), ("config.yaml", "")):
        cap = _capacity(name)
        row = f"`paper1_capacity` ({cap['restarts']} restarts × {how}{cap['iters']} {ROUTE[cap['method']]} steps, {name})"
        assert row in COSTS, row
    assert "8 × 300" not in COSTS


def test_methods_names_both_routes_and_their_stopping_rules():
    s17 = _section("### §1.7")
    assert set(C.ASCENTS) == {"gradient", "lbfgs"}
    for phrase in ("`gradient` (`projected_ascent`", "`lbfgs` (`lbfgs_ascent`", "30 Armijo trials", "η < 1e-12",
                   "σ is asserted on the best iterate only", "`Cap_hat ≥ P` and `E ≤ 1` hold up to that rounding"):
        assert phrase in s17, phrase
    src = Path(C.__file__).read_text()
    assert "for _ in range(30):" in src  # the trials §1.7 counts (test_lbfgs_stopping_rule_is_the_one_methods_states)
    assert "eta > 1e-12" in src


def test_lbfgs_direction_is_not_projected_but_every_iterate_keeps_sigma():
    """§1.7 and the docstring: the L-BFGS direction is not projected again; the retraction keeps σ
    on every iterate (checked here on the trace's final iterates of a small batch)."""
    r = np.random.default_rng(4)
    K = r.standard_normal((3, 5, 5))
    D = r.uniform(0.2, 1.0, (3, 5))
    sigma = np.linalg.svd(K, compute_uv=False)
    X, P = C.lbfgs_ascent(K, D, sigma, 20)
    assert np.allclose(np.linalg.svd(X, compute_uv=False), sigma, rtol=1e-12, atol=0)
    assert (P >= closure.P_of(K, D) * (1 - 1e-12)).all()  # log P never decreases from the start
    assert "not projected onto the tangent space again" in C.lbfgs_ascent.__doc__


def _one_start(seed=7, d=5):
    r = np.random.default_rng(seed)
    K = r.standard_normal((1, d, d))
    D = r.uniform(0.2, 1.0, (1, d))
    return K, D, np.linalg.svd(K, compute_uv=False), C.logP_and_grad(K, D)[0]


def _trial_values(monkeypatch, rise):
    """Every trial point's log P made the start's own plus ``rise`` (the SVDs and gradients still real)."""
    real = C._logP_Z

    def fake(X, D):
        f, *rest = real(X, D)
        return (np.full_like(f, rise), *rest)

    monkeypatch.setattr(C, "_logP_Z", fake)


def test_lbfgs_stopping_rule_is_the_one_methods_states(monkeypatch):
    """§1.7: a start stops when none of its N Armijo trials (N − 1 halvings) is taken, and a trial
    that raises log P by less than the Armijo condition counts as failed. Measured here: every trial
    raises log P by one ulp (a rise, far below c · step · slope), and the start stops after N trials
    (N + 1 SVDs: the start's frame and one per trial) where it began; a rise that meets the
    condition is taken at the first trial."""
    K, D, sigma, f0 = _one_start()
    _trial_values(monkeypatch, np.nextafter(f0[0], np.inf))
    stats = {}
    X, P = C.lbfgs_ascent(K, D, sigma, 5, stats=stats)
    trials = stats["svd"] - 1
    assert stats["steps"].tolist() == [1] and np.array_equal(X, K) and P[0] == np.exp(f0[0])
    assert trials == 30
    s17 = _section("### §1.7")
    assert f"none of whose {trials} Armijo trials" in s17 and f"{trials - 1} halvings" in s17
    assert "a trial that raises log P by less than the Armijo condition asks counts as failed" in s17
    _trial_values(monkeypatch, f0[0] + 1.0)
    stats = {}
    _, P = C.lbfgs_ascent(K, D, sigma, 1, stats=stats)
    assert stats["svd"] == 2 and P[0] == np.exp(f0[0] + 1.0)


def test_methods_numbers_are_the_benchs():
    """Each number §1.7 gives about the optimizer and the rounding of Cap_hat is what the command it
    names prints (bench/capacity_optimizer.py --seeds 5; --seed 0, --seed 2)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("capacity_optimizer", ROOT / "bench" / "capacity_optimizer.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rs = [bench.routes(seed, 20, 6) for seed in range(5)]
    os_ = [bench.roundoff(seed, 2000, 6, 20) for seed in range(5)]
    r, o = bench.summed(rs, os_)
    s17 = _section("### §1.7")
    assert "`python bench/capacity_optimizer.py --seeds 5`" in s17 and "on 100 random 6 × 6 cores" in s17
    for phrase in (f"the L-BFGS bound was higher on {r['higher']} and lower on {r['lower']}",
                   f"higher by up to {r['max_gain']:.2g} (median difference {r['median_gain']:.2g}) and lower by up to "
                   f"{r['largest_loss']:.2g}",
                   f"`--seed 0` gives higher on {rs[0]['higher']} and lower on {rs[0]['lower']} (median {rs[0]['median_gain']:.2g})",
                   f"`--seed 2` higher on {rs[2]['higher']} and lower on {rs[2]['lower']}",
                   f"on {o['cores']:,} random 6 × 6 cores (the same command) by up to "):
        assert phrase in s17, phrase
    # the rounding figures are the last bits of an SVD and a product: another BLAS build moves
    # them, so the doc's own statement of their range is what must hold everywhere
    assert "within 1e-10 and about half the cores" in s17
    assert 0 < o["max_rel_diff"] < 1e-10 and 0.3 < o["exp_logP_smaller"] / o["cores"] < 0.7
