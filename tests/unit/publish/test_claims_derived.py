"""The table columns the ledger reads for numbers the papers derive (sin 0.39°, cos 13°, H·d, the
decimals to which base and instruct agree) and for the qualitative statements (the nonradial
response and leakage share of reduced cores; the trajectories' gap ratio, growth and intervals),
each against an independent computation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headgeom.core.stats import agreeing_decimals
from headgeom.outputs.pk import base_instruct
from headgeom.outputs.pk import within_layer
from headgeom.methods.paper1.gaps import covers_zero
from headgeom.methods.paper1.tail import nonradial_response
from headgeom.outputs.paper1.capacity import p1_table3_trajectories


def test_sine_and_cosine_of_the_smallest_angle():
    ang = np.array([13.0, 40.0, 0.39, 77.0])
    cols = {"model": np.array(["m"] * 4, dtype=object), "kind": np.array(["O"] * 4, dtype=object), "min_angle_deg": ang}
    (row,) = within_layer.pk_table1_min_angles({"pk_within": cols, "pk_cross": {}}, {}, ["m"]).rows
    assert row["min_angle"] == 0.39
    assert row["sin_min_angle"] == pytest.approx(math.sin(0.39 * math.pi / 180))  # 0.0068: the paper's 0.007
    assert row["cos_min_angle"] == pytest.approx(math.cos(0.39 * math.pi / 180))
    assert round(math.cos(13 * math.pi / 180), 2) == 0.97


def test_sum_of_head_widths():
    fields = {"q": {"d_model": 4096, "d_head": 128, "n_heads": 64, "n_kv_heads": 4, "n_layers": 94}}
    (row,) = within_layer.pk_table3_models(fields, ["q"]).rows
    assert row["width"] == 8192 and row["iso"] == pytest.approx(128 / 4096)


@pytest.mark.parametrize("a, b, k", [
    (0.07671, 0.07674, 4),     # 0.0767 both; 0.07671 vs 0.07674
    (0.0767, 0.0767, 10),      # equal: the cap
    (0.0821, 0.0829, 2),       # 0.082 vs 0.083
    (0.31, 0.49, 0),           # 0 vs 0 at the units, 0.3 vs 0.5
    (1.2, 2.9, -1),            # differ at the units
])
def test_agreeing_decimals(a, b, k):
    assert agreeing_decimals(a, b) == k
    assert all(round(a, j) == round(b, j) for j in range(0, k + 1))


def test_base_instruct_decimals_range_over_layers():
    rows = {k: [] for k in ("model", "layer", "kind", "rho", "min_angle_deg")}
    for layer, shift in enumerate((2e-5, 3e-4)):  # mean ρ 0.1231 + shift in the instruct model
        for m, sh in (("base", 0.0), ("inst", shift)):
            rho = np.array([0.1, 0.1231 * 2 - 0.1]) + sh  # mean 0.1234, SD the same in both
            rows["model"] += [m] * 2
            rows["layer"] += [layer] * 2
            rows["kind"] += ["O"] * 2
            rows["rho"] += list(rho)
            rows["min_angle_deg"] += [30.0, 40.0]
    cols = {k: np.array(v, dtype=object if k in ("model", "kind") else None) for k, v in rows.items()}
    fields = {m: {"d_head": 8, "d_model": 64} for m in ("base", "inst")}
    (row,) = base_instruct.pk_appendix_e_base_instruct({"pk_within": cols}, fields, [("base", "inst")]).rows
    # layer 0: 0.12310 vs 0.12312 agree to 4 decimals; layer 1: 0.1231 vs 0.1234 to 3 (SD identical)
    lo = min(agreeing_decimals(0.1231, 0.1231 + s) for s in (2e-5, 3e-4))
    hi = max(agreeing_decimals(0.1231, 0.1231 + s) for s in (2e-5, 3e-4))
    assert (lo, hi) == (3, 4) and row["digits"] == "3 – 4"


def test_nonradial_response_and_leakage_share():
    """The perturbation identity P = ((1+a)s + b√(1−s²))² / ((1+a)² + b² + ‖w‖²): a reduced core
    whose loss comes only from w has leakage share 1; one whose loss comes only from b has share 0."""
    s2 = np.array([0.96, 0.96, 0.95, 0.97])
    a = np.array([0.1, 0.0, 0.0, 0.2])
    b = np.array([0.0, -0.3, 0.0, 0.0])
    w2 = np.array([0.0, 0.0, 0.2, 0.0])
    s = np.sqrt(s2)
    P = ((1 + a) * s + b * np.sqrt(1 - s2)) ** 2 / ((1 + a) ** 2 + b ** 2 + w2)
    pres = np.array([True, False, False, True])
    red = ~pres
    out = nonradial_response(s2, P, a, b, w2, pres, red)
    assert out["nonradial_pres"] == 0.0 and out["nonradial_red"] == pytest.approx(np.median([0.09, 0.2]))
    assert out["nonradial_diff"] == pytest.approx(out["nonradial_red"])
    # head 1: loss from b only (share 0); head 2: from w only (share 1): median 0.5
    assert out["leak_share_red"] == pytest.approx(0.5)
    # w only: P_w=0 = s² exactly, so the share is (s² − P)/(s² − P) = 1
    only_w = nonradial_response(s2[2:3], P[2:3], a[2:3], b[2:3], w2[2:3], np.array([False]), np.array([True]))
    assert only_w["leak_share_red"] == pytest.approx(1.0)


def _cap(gaps):
    """One lineage of len(gaps) checkpoints, one layer: strong (P, cap, E) and matched heads per checkpoint."""
    cols = {k: [] for k in ("model", "layer", "head", "P", "R", "cap", "E", "is_strong", "is_matched", "is_sample")}
    for i, (dp, dc, de) in enumerate(gaps):
        for h, st in enumerate((True, True, False, False)):
            for k, v in (("model", f"c{i}"), ("layer", 0), ("head", h), ("P", 0.5 + (dp if st else 0)), ("R", 0.01),
                         ("cap", 0.8 + (dc if st else 0)), ("E", 0.4 + (de if st else 0)), ("is_strong", st),
                         ("is_matched", not st), ("is_sample", False)):
                cols[k].append(v)
    return {k: np.asarray(v) for k, v in cols.items()}


def test_trajectory_gap_ratio_and_growth():
    gaps = [(0.0, 0.01, 0.0), (0.2, 0.02, 0.1), (0.4, 0.05, 0.3)]  # (closure, capacity, attainment) gaps
    rows = p1_table3_trajectories(_cap(gaps), {"L": ["c0", "c1", "c2"]}, 0.9, 0).rows
    final = rows[-1]
    assert final["c_over_p"] == pytest.approx(0.05 / 0.4)
    # attainment gap grew 0.3, capacity gap 0.04
    assert final["growth_diff"] == pytest.approx(0.3 - 0.04)
    assert rows[0]["growth_diff"] == pytest.approx(0.0)
    assert final["e_ci_zero"] is None  # no bootstrap replicates: not computed


def test_covers_zero():
    assert covers_zero(-0.1, 0.2) is True and covers_zero(0.1, 0.2) is False
    assert covers_zero(float("nan"), 0.2) is None
