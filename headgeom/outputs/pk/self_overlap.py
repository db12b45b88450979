"""The PK paper's self-head overlap (Appendix H): the mean over heads of ρ between a head's own
spaces against label permutations, over layers and per layer."""

from __future__ import annotations

import numpy as np

from headgeom.outputs.formats import Column, Table
from headgeom.outputs.pk.common import FOUR_PLACES, range_text, table


@table("pk_appendix_h_self_overlap", families=("pk_self",))
def pk_appendix_h_self_overlap(data, models) -> Table:
    """**PK paper, Appendix H.** Self-head overlap: mean over heads of ρ between a head's own spaces (V reading
    vs writing, Q vs own group's K, Q vs writing) against label permutations (GQA: every labelling of
    the KV groups); range over layers, largest p, permutations and whether they were exhaustive."""
    s = data.get("pk_self", {})
    rows = []
    for m in models:
        for test in ("V_vs_O", "Q_vs_K", "Q_vs_O"):
            if not s:
                continue
            sel = (s["model"] == m) & (s["test"] == test)
            if not sel.any():
                continue
            p = np.asarray(s["p"][sel], float)
            rows.append({"model": m, "test": test, "layers": int(sel.sum()),
                         "observed": range_text(s["observed"][sel]), "null_mean": range_text(s["null_mean"][sel]),
                         "p_max": float(np.nanmax(p)) if np.isfinite(p).any() else float("nan"),
                         "n_null": int(np.max(s["n_null"][sel])), "exact": bool(np.all(s["exact"][sel]))})
    return Table(columns=[Column("model", "Model"), Column("test", "Test"), Column("layers", "Layers"), Column("observed", "Observed (range)"),
                          Column("null_mean", "Permutation mean (range)"), Column("p_max", "Max p", "{:.4f}"),
                          Column("n_null", "Permutations"), Column("exact", "Exhaustive")], rows=rows,
                          notes="V_vs_O: each head's writing space vs its own (group's) V reading space; Q_vs_K: Q vs own group's K; Q_vs_O: Q vs own writing space. Undefined with one KV group.")


@table("pk_appendix_h_self_layers", families=("pk_self",))
def pk_appendix_h_self_layers(data, models) -> Table:
    """**PK paper, Appendix H (per layer).** Self-head overlap per layer and test (V reading vs writing, Q vs
    own group's K, Q vs writing): the observed mean over heads of ρ, the label-permutation mean, its p,
    permutations, whether they were exhaustive, and whether p is the smallest the test gives, 1/(n+1)."""
    s = data.get("pk_self", {})
    rows = []
    if s:
        for i in range(len(s["model"])):
            if str(s["model"][i]) not in models:
                continue
            rows.append({"model": str(s["model"][i]), "layer": int(s["layer"][i]), "test": str(s["test"][i]),
                         "observed": float(s["observed"][i]), "null_mean": float(s["null_mean"][i]),
                         "p": float(s["p"][i]), "n_null": int(s["n_null"][i]), "exact": bool(s["exact"][i]),
                         # the smallest p the test can give, 1/(n+1): the observed above every permutation
                         "at_min_p": bool(np.isclose(float(s["p"][i]), 1.0 / (int(s["n_null"][i]) + 1)))})
    rows.sort(key=lambda r: (r["model"], r["test"], r["layer"]))
    cols = [Column("model", "Model"), Column("test", "Test"), Column("layer", "Layer"),
            Column("observed", "Observed", FOUR_PLACES), Column("null_mean", "Permutation mean", FOUR_PLACES),
            Column("p", "p", "{:.4f}"), Column("n_null", "Permutations"), Column("exact", "Exhaustive"),
            Column("at_min_p", "p = 1/(n+1)")]
    return Table(columns=cols, rows=rows)
