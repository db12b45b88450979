"""Ledger entries that say what their sentence says: layer 46's "none below half the isotropic
value" as a count of pairs, the 670 large-endpoint heads favoring their anchor, "weaker than every
pair of either null" read for both nulls, draws per head as 58,432 / 7,304, the reductions the
"no control reaches 0.9" and "disjoint" claims rest on refusing NaN cells, and the numbers the
papers derive from their settings, each against an independent computation."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest

from headgeom.publish.claims import AGREES, DIFFERS, build_rows, load_ledger
from ledger_tables import judge, write_table as _write

LEDGER = Path(__file__).resolve().parents[3] / "config" / "claims.yaml"


@functools.cache
def _ledger():
    return load_ledger(LEDGER)


def _entry(cid):
    return dict(next(e for e in _ledger() if e["id"] == cid))


def _judge(tmp_path, cid, models_run):
    return judge(_entry(cid), tmp_path, models_run)


@pytest.mark.parametrize("share, status", [(0.0, AGREES), (8 / 2016, DIFFERS), (0.004, DIFFERS), (0.4, DIFFERS),
                                           (1 / 2016, DIFFERS), (float("nan"), DIFFERS)])
def test_layer_46_none_below_half_is_a_count_of_pairs(tmp_path, share, status):
    """'none below half the isotropic value' (2016 pairs): the old entry read the share at its zero
    printed decimals, so a share of 0.004 (8 pairs) or 0.4 agreed with 'none'."""
    _write(tmp_path, "pk_fig3_fig9_conditions", [{"model": "qwen3-235b-a22b", "scope": "within", "kind": "O", "layer": 46,
                                                  "n_pairs": 2016, "share_below_half_iso": repr(share)}])
    got = _judge(tmp_path, "pk.s52.qwen235b.L46.none_below_half", ["qwen3-235b-a22b"])
    assert got == {"pk.s52.qwen235b.L46.none_below_half": status}
    assert "share_below_half_iso" not in _entry("pk.s52.qwen235b.L46").get("values", {})


def test_all_670_large_endpoint_heads_favor_their_anchor(tmp_path):
    models = ["olmo2-13b", "qwen2.5-72b", "qwen3-235b-a22b"]
    e = _entry("p1.anchor.fav_large")
    assert e["models"] == models and e["value"] == "all"
    for favs, status in ((["200/200", "230/230", "240/240"], AGREES), (["200/200", "229/230", "240/240"], DIFFERS)):
        _write(tmp_path, "p1_anchors", [{"model": m, "fav": f} for m, f in zip(models, favs)])
        assert _judge(tmp_path, "p1.anchor.fav_large", models) == {"p1.anchor.fav_large": status}


def test_most_pairs_below_every_value_of_both_nulls(tmp_path):
    """'weaker than every pair of either null': most pairs below both nulls' values; the old reading
    checked the reassignment null only."""
    for rot, status in ((50, AGREES), (30, DIFFERS)):
        _write(tmp_path, "pk_fig2_counts", [{"model": "gpt2-124m", "pairs": 66, "below_all_reassign": 60,
                                             "below_all_rotation": rot}])
        got = _judge(tmp_path, "pk.q.fig2_most_below.124m", ["gpt2-124m"])
        assert got == {"pk.q.fig2_most_below.124m.below_all_reassign": AGREES,
                       "pk.q.fig2_most_below.124m.below_all_rotation": status}


def test_scramble_draws_per_head_are_draws_over_heads(tmp_path):
    e = _entry("p1.set.draws.scramble")
    heads = [811 + i for i in range(9)]
    for per, status in ((8, AGREES), (7, DIFFERS)):
        _write(tmp_path, "p1_orientation_scramble", [{"model": m, "heads": h, "draws": per * h} for m, h in zip(e["models"], heads)])
        assert _judge(tmp_path, "p1.set.draws.scramble", e["models"]) == {"p1.set.draws.scramble": status}


def test_the_maximum_and_minimum_claims_refuse_a_nan_cell(tmp_path):
    """p1.t2.wrong_v_none ('no control reaches 0.9', max < 0.9) and pk.s41.min_all ('disjoint', min
    > 0.1): the old reducers dropped NaN cells, so a model whose control was NaN still agreed."""
    e = _entry("p1.t2.wrong_v_none")
    for cells, status in ((["0.5"] * 6, AGREES), (["nan"] + ["0.5"] * 5, DIFFERS)):
        _write(tmp_path, "p1_table2_strong_tail", [{"model": m, "wrong_v_max": c} for m, c in zip(e["models"], cells)])
        assert _judge(tmp_path, "p1.t2.wrong_v_none", e["models"]) == {"p1.t2.wrong_v_none": status}
    e = _entry("pk.s41.min_all")
    comps = [r["comparison"] for r in e["rows"]]
    for bad, status in (("3.9", AGREES), ("nan", DIFFERS)):
        _write(tmp_path, "pk_table1_min_angles", [{"model": m, "comparison": c, "min_angle": bad if i == 0 and m == "gpt2-124m"
                                                   else "5.0"} for m in e["models"] for i, c in enumerate(comps)])
        assert _judge(tmp_path, "pk.s41.min_all", e["models"]) == {"pk.s41.min_all": status}


def test_the_derived_numbers(tmp_path):
    """Each derived entry against an independent computation of the number the paper prints."""
    torch = pytest.importorskip("torch")
    rows = {r["id"]: r for r in build_rows(_ledger(), tmp_path, [])[0]}
    want = {
        "pk.s41.bf16": 100 * torch.finfo(torch.bfloat16).eps / 2,  # unit roundoff = eps / 2 = 2^-8
        "p1.set.residual": math.sqrt(0.1),
        "pk.act.setup.tokens": 8 * 256,
        "p1.traj.tinyllama_tokens": 10.0,  # revision step-5k-token-10B
    }
    for cid, v in want.items():
        e = _entry(cid)
        assert e.get("derive") and "derived" in e["note"] and not e.get("table"), cid
        assert rows[cid]["value"] == pytest.approx(v, rel=1e-12), cid
        assert rows[cid]["status"] == AGREES and rows[cid]["read"].startswith("derived: "), cid
