"""Paper 1's feasible capacity: Cap_hat and attainment E of strong, matched and sampled heads, the
trajectories of Table 3 and the capacity figure (statistics in headgeom.methods.paper1.gaps)."""

from __future__ import annotations

import numpy as np

from headgeom.core.stats import finite_median
from headgeom.methods.paper1.gaps import (checkpoint_gaps, covers_zero, eligible_layers, gap_intervals,
                                          pooled_final_gaps, sample_layer_counts)
from headgeom.outputs.formats import Table, pyplot
from headgeom.outputs.paper1.common import (CAPACITY, NAN, STRONG_THRESHOLD_PARAM, column, count_of, figure,
                                            interval_columns, model_rows, table, values)


@table("p1_capacity", families=(CAPACITY,), params=STRONG_THRESHOLD_PARAM | {"bootstrap": "paper1/bootstrap"})
def p1_capacity(paper1_capacity: dict, models: list[str], strong_threshold: float, bootstrap: int = 0) -> Table:
    """**Paper 1, feasible capacity.** Feasible capacity Cap_hat (projected ascent over orientations,
    spectrum and support fixed) and attainment E = (P - R)/(Cap_hat - R) of strong, layer-matched
    ordinary and hash-sampled heads (t = {{ snakemake.params.strong_threshold }}), and beside them the
    capacity from the random starts only and E from it; layer-clustered bootstrap 95% intervals of the
    closure and capacity gaps ({{ snakemake.params.bootstrap }} replicates, ``paper1.bootstrap``)."""
    cap, n_boot = paper1_capacity, int(bootstrap or 0)
    rows = []
    for m in models:
        s = model_rows(cap, m)
        P, R, cp, E = (values(cap, k, s) for k in ("P", "R", "cap", "E"))
        # from the random starts only (absent in shards written before these columns: NaN)
        cr, Er = ((values(cap, k, s) if k in cap else np.full(P.shape, NAN)) for k in ("cap_random", "E_random"))
        st, mt, sm = (values(cap, k, s, bool) for k in ("is_strong", "is_matched", "is_sample"))
        n_lay, lay_hi, no_strong = sample_layer_counts(values(cap, "layer", s, np.int64), cp, st, sm)
        hi = sm & np.isfinite(cp) & (cp >= 0.9)
        closure_gap = finite_median(P[st]) - finite_median(P[mt])
        cap_gap = finite_median(cp[st]) - finite_median(cp[mt])
        p_lo, p_hi, c_lo, c_hi = gap_intervals(cap, s, m, n_boot)
        rows.append({
            "model": m, "n_strong": int(st.sum()), "cap_strong": finite_median(cp[st]), "E_strong": finite_median(E[st]),
            "n_matched": int(mt.sum()), "cap_matched": finite_median(cp[mt]), "E_matched": finite_median(E[mt]),
            "closure_gap": closure_gap, "cap_gap": cap_gap,
            "gap_ratio": cap_gap / closure_gap if np.isfinite(closure_gap) and closure_gap != 0 else NAN,
            "n_sample": int(sm.sum()), "cap_sample": finite_median(cp[sm]), "layers_hi": count_of(lay_hi, n_lay),
            "layers_no_strong": no_strong, "sample_hi": int(hi.sum()),
            "sample_hi_below": count_of(int(np.sum(hi & (P < strong_threshold))), int(hi.sum())),
            "cap_random_strong": finite_median(cr[st]), "E_random_strong": finite_median(Er[st]),
            "cap_random_matched": finite_median(cr[mt]), "E_random_matched": finite_median(Er[mt]),
            "cap_random_sample": finite_median(cr[sm]),
            "closure_gap_lo": p_lo, "closure_gap_hi": p_hi, "cap_gap_lo": c_lo, "cap_gap_hi": c_hi,
        })
    return Table(
        columns=[
            column("model", "Model"), column("n_strong", "Strong"), column("cap_strong", "Cap strong", "{:.3f}"),
            column("E_strong", "E strong", "{:.3f}"), column("n_matched", "Matched"),
            column("cap_matched", "Cap matched", "{:.3f}"), column("E_matched", "E matched", "{:.3f}"),
            column("closure_gap", "Closure gap", "{:.3f}"), column("cap_gap", "Capacity gap", "{:.3f}"),
            column("gap_ratio", "Capacity/closure gap", "{:.3f}"), column("n_sample", "Sample"),
            column("cap_sample", "Cap sample", "{:.3f}"), column("layers_hi", "Layers sample Cap > 0.8"),
            column("layers_no_strong", "Layers without strong"), column("sample_hi", "Sample Cap ≥ 0.9"),
            column("sample_hi_below", "of which P < t"),
            column("cap_random_strong", "Cap strong, random starts", "{:.3f}"),
            column("E_random_strong", "E strong, random starts", "{:.3f}"),
            column("cap_random_matched", "Cap matched, random starts", "{:.3f}"),
            column("E_random_matched", "E matched, random starts", "{:.3f}"),
            column("cap_random_sample", "Cap sample, random starts", "{:.3f}"),
            *interval_columns("closure_gap_lo", "closure_gap_hi", "Closure gap"),
            *interval_columns("cap_gap_lo", "cap_gap_hi", "Capacity gap"),
        ],
        rows=rows,
        notes="Medians over heads; gaps are strong minus matched medians. Cap_hat is a constructive lower bound "
              "(trained K + random restarts, config paper1.capacity); E is not clipped. Since Cap_hat includes the "
              "trained K's start, E ≤ 1 by construction; the 'random starts' columns use only the Haar-random "
              "restarts (Cap from them alone, E = (P - R)/(Cap_random - R)), so E > 1 there means the trained "
              "orientation beats every random-start ascent. They need restarts ≥ 2 (else –). Gap 95% intervals: "
              "percentile bootstrap resampling complete layers of the model (paper1.bootstrap replicates; – with 0).",
    )


@table("p1_table3_trajectories", families=(CAPACITY,),
       params=STRONG_THRESHOLD_PARAM | {"bootstrap": "paper1/bootstrap", "lineages": "paper1/lineages"},
       shard_models="lineages")
def p1_table3_trajectories(paper1_capacity: dict, lineages: dict[str, list[str]] | None, strong_threshold: float,
                           bootstrap: int, models: list[str] = ()) -> Table:
    """**Paper 1, Table 3.** Trajectories: closure P, scramble median R, feasible capacity Cap_hat and
    attainment E per checkpoint of each lineage (groups fixed at the final checkpoint; t = {{
    snakemake.params.strong_threshold }}), with the attainment gap and its hierarchical-bootstrap
    interval ({{ snakemake.params.bootstrap }} replicates), and the same intervals for the closure and
    capacity gaps."""
    cap, n_boot, default_lineages = paper1_capacity, int(bootstrap), not lineages
    # no lineages configured: every model is a lineage of one checkpoint
    lineages = lineages or {m: [m] for m in models}
    rows = []
    finals = {}
    for name, members in lineages.items():
        final = model_rows(cap, members[-1])
        eligible = eligible_layers(values(cap, "layer", final, np.int64), values(cap, "is_strong", final, bool),
                                   values(cap, "is_matched", final, bool))
        for pos, m in enumerate(members):
            s = model_rows(cap, m)
            cs = {k: values(cap, k, s) for k in ("P", "R", "cap", "E")}
            layer = values(cap, "layer", s, np.int64)
            st, mt = values(cap, "is_strong", s, bool), values(cap, "is_matched", s, bool)
            el = np.isin(layer, eligible)
            gaps = checkpoint_gaps(cs, layer, eligible, st, mt, n_boot, name, m)
            if pos == len(members) - 1:
                finals[name] = gaps
            if pos == 0:
                first = gaps
            rows.append({
                "lineage": name, "checkpoint": m, "step": pos, "layers": len(eligible),
                "n_strong": int((st & el).sum()), "n_matched": int((mt & el).sum()),
                "P_s": finite_median(cs["P"][st & el]), "P_o": finite_median(cs["P"][mt & el]),
                "R_s": finite_median(cs["R"][st & el]), "R_o": finite_median(cs["R"][mt & el]),
                "cap_s": finite_median(cs["cap"][st & el]), "cap_o": finite_median(cs["cap"][mt & el]),
                "E_s": finite_median(cs["E"][st & el]), "E_o": finite_median(cs["E"][mt & el]),
                **{k: gaps[k] for k in ("p_gap", "c_gap", "e_gap", "e_lo", "e_hi", "p_lo", "p_hi", "c_lo", "c_hi")},
                "e_pos": count_of(int(np.sum(np.array(gaps["per_layer"]) > 0)), len(gaps["per_layer"])),
                "c_over_p": gaps["c_gap"] / gaps["p_gap"] if gaps["p_gap"] else NAN,
                "growth_diff": (gaps["e_gap"] - first["e_gap"]) - (gaps["c_gap"] - first["c_gap"]),
                "e_ci_zero": covers_zero(gaps["e_lo"], gaps["e_hi"]), "c_ci_zero": covers_zero(gaps["c_lo"], gaps["c_hi"]),
            })
    if len(finals) > 1:
        pooled = pooled_final_gaps(finals, n_boot)
        rows.append({"lineage": "all (final)", "checkpoint": "–", "step": None, "layers": len(pooled["per_layer"]),
                     **{k: pooled[k] for k in ("p_lo", "p_hi", "c_lo", "c_hi", "e_gap", "e_lo", "e_hi")},
                     "e_pos": count_of(int(np.sum(np.array(pooled["per_layer"]) > 0)), len(pooled["per_layer"]))})
    note = ("Groups (strong P ≥ t, layer-matched ordinary) are fixed at the final checkpoint of each lineage; eligible "
            "layers hold both. Gaps: mean over eligible layers of (strong mean − ordinary mean); growth: the gap at this "
            "checkpoint minus the gap at the lineage's first; covers 0: the 95% interval holds 0 (empty without "
            "bootstrap replicates); E-gap 95% interval: "
            "hierarchical bootstrap over layers then heads (and lineages for the pooled row); the closure- and "
            "capacity-gap intervals the same, from their own replicates.")
    if default_lineages:
        note += " No paper1.lineages configured: each active model is shown as a one-checkpoint lineage (its endpoint)."
    return Table(
        columns=[
            column("lineage", "Lineage"), column("checkpoint", "Checkpoint"), column("step", "#"),
            column("layers", "Layers"), column("n_strong", "Strong"), column("n_matched", "Ordinary"),
            column("P_s", "P strong", "{:.3f}"), column("P_o", "P ord.", "{:.3f}"),
            column("R_s", "R strong", "{:.2e}"), column("R_o", "R ord.", "{:.2e}"),
            column("cap_s", "Cap strong", "{:.3f}"), column("cap_o", "Cap ord.", "{:.3f}"),
            column("E_s", "E strong", "{:.3f}"), column("E_o", "E ord.", "{:.3f}"),
            column("p_gap", "Closure gap", "{:.3f}"), column("c_gap", "Capacity gap", "{:.3f}"),
            column("e_gap", "Attainment gap", "{:.3f}"), column("e_lo", "95% lo", "{:.3f}"),
            column("e_hi", "95% hi", "{:.3f}"), column("e_pos", "Layers E-gap > 0"),
            *interval_columns("p_lo", "p_hi", "Closure gap"),
            *interval_columns("c_lo", "c_hi", "Capacity gap"),
            column("c_over_p", "Capacity gap / closure gap", "{:.3f}"),
            column("growth_diff", "E-gap growth − capacity-gap growth", "{:.3f}"),
            column("e_ci_zero", "E-gap 95% covers 0"), column("c_ci_zero", "Capacity gap 95% covers 0"),
        ],
        rows=rows,
        notes=note,
    )


@figure("p1_fig_capacity", families=(CAPACITY,), params=STRONG_THRESHOLD_PARAM)
def p1_fig_capacity(paper1_capacity: dict, models: list[str], strong_threshold: float):
    """**Paper 1, feasible capacity.** Feasible capacity against attained closure for strong, matched and
    sampled heads."""
    cap = paper1_capacity
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    marks = (("is_sample", "sample", "o", 0.35), ("is_matched", "matched ordinary", "s", 0.6), ("is_strong", "strong", "^", 0.9))
    for i, m in enumerate(models):
        s = model_rows(cap, m)
        P, cp = values(cap, "P", s), values(cap, "cap", s)
        for key, lab, mk, al in marks:
            g = values(cap, key, s, bool) & np.isfinite(cp)
            if g.any():
                ax.scatter(cp[g], P[g], s=12, marker=mk, color=f"C{i}", alpha=al, label=f"{m} {lab}")
    ax.plot([0, 1], [0, 1], "k-", lw=0.7)
    ax.axhline(strong_threshold, color="k", ls=":", lw=0.8)
    ax.set(xlabel="feasible capacity Cap_hat", ylabel="attained closure P", xlim=(0, 1.02), ylim=(0, 1.02),
           title="Capacity vs attained closure")
    ax.legend(fontsize=6)
    return fig
