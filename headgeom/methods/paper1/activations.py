"""Paper 1's natural return on real text summarised per model, from the activation stage's
``activation_natural_return`` columns and the per-head closure P (``paper1_heads``): the paired
high/low-closure population (headgeom.methods.natural_return.population) and its medians."""

from __future__ import annotations

import numpy as np

from headgeom.core.stats import finite_quantile
from headgeom.methods.natural_return import population


def natural_return_summary(nat: dict, clo: dict, model: str, high_q: float = 0.9,
                           low_q: float = 0.5) -> tuple[dict, dict[str, np.ndarray]]:
    """(statistics, populations) of one model: the paired high/low heads and eligible layers,
    median alignment of high heads, of their wrong-V control and of the low heads, layers where
    both contrasts (high − low, high − wrong-V when defined) are positive, median g_y of high and
    low heads; populations: the alignments of the high, wrong-V and low heads."""
    sn, sc = nat["model"] == model, clo["model"] == model
    position = {(int(L), int(h)): i for i, (L, h) in enumerate(zip(nat["layer"][sn], nat["head"][sn]))}
    P = clo["P"][sc]
    layer = clo["layer"][sc].astype(int)
    head = clo["head"][sc].astype(int)
    hi, lo, eligible = population(P, layer, high_q, low_q)
    ih = np.array([position[(layer[i], head[i])] for i in hi], int)
    il = np.array([position[(layer[i], head[i])] for i in lo], int)
    A, Aw, g = nat["align"][sn], nat["align_wrong_v"][sn], nat["g_y"][sn]
    both = 0
    for L in eligible:
        in_layer = layer[hi] == L
        a_h, a_w, a_l = A[ih[in_layer]], Aw[ih[in_layer]], A[il[in_layer]]
        if np.nanmean(a_h) - np.nanmean(a_l) > 0 and (np.all(np.isnan(a_w)) or np.nanmean(a_h) - np.nanmean(a_w) > 0):
            both += 1
    stats = {
        "pairs": len(hi), "heads": 2 * len(hi), "eligible_layers": len(eligible),
        "align_high": finite_quantile(A[ih], 0.5), "align_wrong_v": finite_quantile(Aw[ih], 0.5), "align_low": finite_quantile(A[il], 0.5),
        "layers_both_positive": both, "g_y_high": finite_quantile(g[ih], 0.5), "g_y_low": finite_quantile(g[il], 0.5),
        "wrong_v_defined": bool(np.isfinite(Aw[ih]).any()) if len(ih) else False,
    }
    return stats, {"high": A[ih], "wrong_v": Aw[ih], "low": A[il]}
