"""Shared by the paper 1 modules: seed purposes, the flags that exclude a head, principal
coordinates from a layer's Grams (headgeom.methods.grams.LayerGrams), and the layer groups of
shard rows the tables' statistics run over."""

from __future__ import annotations

import numpy as np

from headgeom.core.groupby import group_rows, row_groups
from headgeom.methods import closure as C
from headgeom.methods.grams import LayerGrams


SCRAMBLE, HAAR, CAPACITY, MATCHED, SAMPLE, BOOTSTRAP = "scramble", "haar", "capacity", "matched", "sample", "bootstrap"

# Heads whose principal coordinates are defined: closure flags that exclude a head.
EXCLUDING_FLAGS = ("nonfinite", "zero_T", "rank_deficient")


def coords(grams: LayerGrams, heads, groups):
    """Principal coordinates (D, K) of O_h paired with V_g for the given (head, group) lists,
    from the layer's full M (``LayerGrams.M_full``)."""
    heads, groups = np.asarray(heads, int), np.asarray(groups, int)
    if heads.size == 0:
        return np.zeros((0, grams.d)), np.zeros((0, grams.d, grams.d))
    return C.principal_coordinates(grams.A[heads], grams.B[groups], grams.M_full[heads, groups])


def valid_heads(base: dict, geo: LayerGrams) -> np.ndarray:
    """Heads with defined principal coordinates (full-rank finite O and V, T and T^2 nonzero)."""
    fl = base["flags"]
    bad = np.array([any(x in str(s).split(",") for x in EXCLUDING_FLAGS) for s in fl], dtype=bool)
    return ~bad & (geo.rank_O == geo.d) & (geo.rank_V[geo.kv_group] == geo.d) & np.isfinite(base["P"])


def layer_rows(layer) -> list[tuple[int, np.ndarray]]:
    """[(layer, positions of its rows)] over an array of layer indices, layers ascending, each
    layer's rows in order."""
    groups = row_groups({"layer": np.asarray(layer, dtype=np.int64)}, ("layer",))
    return sorted(((L, rows) for (L,), rows in groups.items()), key=lambda g: g[0])


def model_layer_clusters(cols: dict, rows) -> list[list[np.ndarray]]:
    """The selected rows (boolean ``rows``) grouped by model, then by layer, as positions within
    the selection: models in order of first appearance, layers ascending (the clusters of
    headgeom.core.stats.cluster_bootstrap)."""
    sel = {"model": np.asarray(cols["model"])[rows], "layer": np.asarray(cols["layer"]).astype(np.int64)[rows]}
    by_model = group_rows(row_groups(sel, ("model", "layer")).items(), key=lambda g: g[0][0])
    return [[pos for _, pos in sorted(layers, key=lambda g: g[0][1])] for layers in by_model.values()]
