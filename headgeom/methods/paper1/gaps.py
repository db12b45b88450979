"""Strong against layer-matched ordinary heads over the capacity shard columns
(``paper1_capacity``): the closure, capacity and attainment gaps, their bootstrap intervals
(layer-clustered per model; hierarchical over layers and heads along a lineage), and the layer
counts of the hash-sampled heads."""

from __future__ import annotations

import numpy as np

from headgeom.core.seeds import rng_for
from headgeom.core.stats import cluster_bootstrap, finite_median, hierarchical_bootstrap
from headgeom.methods.paper1.common import BOOTSTRAP, layer_rows, model_layer_clusters

NAN = float("nan")


def gap_intervals(cap: dict, rows, model: str, n_boot: int) -> tuple:
    """Layer-clustered percentile intervals (complete layers resampled within the model;
    core.stats.cluster_bootstrap) of the closure gap and the capacity gap, each the strong median
    minus the matched median: (closure lo, hi, capacity lo, hi)."""
    if not n_boot or not rows.any():
        return (NAN,) * 4
    P, cp = np.asarray(cap["P"]).astype(float)[rows], np.asarray(cap["cap"]).astype(float)[rows]
    st, mt = np.asarray(cap["is_strong"]).astype(bool)[rows], np.asarray(cap["is_matched"]).astype(bool)[rows]

    def stat(ix):
        a, b = st[ix], mt[ix]
        return [finite_median(P[ix][a]) - finite_median(P[ix][b]), finite_median(cp[ix][a]) - finite_median(cp[ix][b])]

    lo, hi = cluster_bootstrap(stat, model_layer_clusters(cap, rows), n_boot, rng_for(model, -1, -1, 0, BOOTSTRAP + "-capacity"))
    return lo[0], hi[0], lo[1], hi[1]


def sample_layer_counts(layer, cap, strong, sample) -> tuple[int, int, int]:
    """(layers with a finite sampled capacity, of which those whose sampled median Cap_hat > 0.8,
    layers without a strong head)."""
    high, n_layers, no_strong = 0, 0, 0
    for _, rows in layer_rows(layer):
        sampled = rows[sample[rows]]
        if np.isfinite(cap[sampled]).any():
            n_layers += 1
            high += int(finite_median(cap[sampled]) > 0.8)
        no_strong += int(not np.any(strong[rows]))
    return n_layers, high, no_strong


def eligible_layers(layer, strong, matched) -> list[int]:
    """Layers with both a strong and a matched head (the trajectory's groups, at the final checkpoint)."""
    return [L for L, rows in layer_rows(layer) if strong[rows].any() and matched[rows].any()]


def trajectory_units(values, layer, eligible, strong, matched) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per eligible layer: (finite values of its strong heads, of its matched heads)."""
    ok = np.isfinite(values)
    return [(values[(layer == L) & strong & ok], values[(layer == L) & matched & ok]) for L in eligible]


def layer_gap(units) -> tuple[float, list]:
    """(mean over layers of strong mean − matched mean, the per-layer gaps), layers with both."""
    g = [a.mean() - b.mean() for a, b in units if a.size and b.size]
    return float(np.mean(g)) if g else NAN, g


def checkpoint_gaps(cols: dict, layer, eligible, strong, matched, n_boot: int, lineage: str, checkpoint: str) -> dict:
    """At one checkpoint: the per-layer units of attainment E, closure P and capacity Cap_hat
    (units_E, units_P, units_cap), their gaps (e_gap with per-layer gaps, p_gap, c_gap) and the
    hierarchical-bootstrap 95% intervals of each (e_lo/e_hi, p_lo/p_hi, c_lo/c_hi), each from its
    own generator."""
    units = {k: trajectory_units(cols[k], layer, eligible, strong, matched) for k in ("E", "P", "cap")}
    e_gap, per_layer = layer_gap(units["E"])
    out = {"units_E": units["E"], "units_P": units["P"], "units_cap": units["cap"], "e_gap": e_gap,
           "per_layer": per_layer, "p_gap": layer_gap(units["P"])[0], "c_gap": layer_gap(units["cap"])[0]}
    for key, unit, purpose in (("e", "E", BOOTSTRAP), ("p", "P", BOOTSTRAP + "-closure"), ("c", "cap", BOOTSTRAP + "-capacity")):
        _, out[f"{key}_lo"], out[f"{key}_hi"] = hierarchical_bootstrap([units[unit]], n_boot, rng_for(lineage, checkpoint, -1, 0, purpose))
    return out


def pooled_final_gaps(finals: dict[str, dict], n_boot: int) -> dict:
    """Over the final checkpoints of every lineage (``checkpoint_gaps`` of each): the attainment
    gap (e_gap) with its per-layer gaps, and the hierarchical-bootstrap intervals of the
    attainment, closure and capacity gaps (lineages, then layers, then heads)."""
    e_gap, e_lo, e_hi = hierarchical_bootstrap([f["units_E"] for f in finals.values()], n_boot,
                                               rng_for("all-lineages", "final", -1, 0, BOOTSTRAP))
    per_layer = [a.mean() - b.mean() for f in finals.values() for a, b in f["units_E"] if a.size and b.size]
    _, p_lo, p_hi = hierarchical_bootstrap([f["units_P"] for f in finals.values()], n_boot,
                                           rng_for("all-lineages", "final", -1, 0, BOOTSTRAP + "-closure"))
    _, c_lo, c_hi = hierarchical_bootstrap([f["units_cap"] for f in finals.values()], n_boot,
                                           rng_for("all-lineages", "final", -1, 0, BOOTSTRAP + "-capacity"))
    return {"e_gap": e_gap, "e_lo": e_lo, "e_hi": e_hi, "per_layer": per_layer,
            "p_lo": p_lo, "p_hi": p_hi, "c_lo": c_lo, "c_hi": c_hi}


def covers_zero(lo, hi):
    """Whether a 95% interval holds 0; None (an empty cell) when it was not computed."""
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    return bool(lo <= 0 <= hi)
