"""The capacity search's settings as docs/methods.md §1.7 and docs/costs.md state them are the ones
config/paper.yaml and config/config.yaml run (so the documents cannot drift from the configs again),
and the routes and stopping rules §1.7 describes are the code's."""

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
    for phrase in ("`gradient` (`projected_ascent`", "`lbfgs` (`lbfgs_ascent`", "30 halvings", "η < 1e-12",
                   "σ is asserted on the best iterate only", "`Cap_hat ≥ P`, so `E ≤ 1`"):
        assert phrase in s17, phrase
    src = Path(C.__file__).read_text()
    assert "for _ in range(30):" in src  # the halvings §1.7 counts
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
