"""Paper 1's shared value: the sibling law of Table 4, value anchors with the left-zero band, and the
sibling-law figure (statistics in headgeom.methods.paper1.siblings)."""

from __future__ import annotations

import numpy as np

from headgeom.core.stats import finite_median
from headgeom.methods.paper1.siblings import band_pairs, layers_favoring_law
from headgeom.outputs.formats import POOLED_MODELS, Table, pyplot
from headgeom.outputs.paper1.common import (NAN, PAIRS, STRONG_THRESHOLD_PARAM, column, count_of, figure, model_rows,
                                            pool_members, pooled_models, share, table, values)
from headgeom.outputs.registry import HEADS

#: the ranges the sibling-law figure clips F_ij and rho_ij to
F_RANGE, RHO_RANGE = (-1.0, 1.05), (-0.5, 1.5)


@table("p1_table4_sibling_law", families=(PAIRS,), params=STRONG_THRESHOLD_PARAM)
def p1_table4_sibling_law(paper1_pairs: dict, models: list[str] = (), strong_threshold: float = 0.9) -> Table:
    """**Paper 1, Table 4.** Shared-value sibling law: right heads j with P(T_j) ≥ {{
    snakemake.params.strong_threshold }} and every other head i of their KV group; median fixed-gain
    explanation F_ij and gain ratio ρ_ij against the next-group control."""
    pairs = paper1_pairs
    rows = []
    for m in models:
        s = model_rows(pairs, m)
        if not s.any():
            continue
        Pj, F, rho, Fc, rc = (values(pairs, k, s) for k in ("P_j", "F", "rho", "F_ctrl", "rho_ctrl"))
        layer = values(pairs, "layer", s, np.int64)
        hj = values(pairs, "head_j", s, np.int64)
        right = np.isfinite(Pj) & (Pj >= strong_threshold) & np.isfinite(F)
        n_right = len({(int(L), int(h)) for L, h in zip(layer[right], hj[right])})
        informative, favoring = layers_favoring_law(layer, right, F, Fc)
        rows.append({
            "model": m, "right": n_right, "comp": int(right.sum()),
            "F": finite_median(F[right]), "rho": finite_median(rho[right]),
            "F_ctrl": finite_median(Fc[right]), "rho_ctrl": finite_median(rc[right]),
            "layers_fav": count_of(favoring, informative), "F_all": finite_median(F),
            "bound_checked": int(np.isfinite(values(pairs, "gamma", s)).sum()),
        })
    return Table(
        columns=[
            column("model", "Model"), column("right", "Right heads"), column("comp", "Compositions"),
            column("F", "Median F_ij", "{:.3f}"), column("rho", "Median ρ_ij", "{:.3f}"),
            column("F_ctrl", "Control F", "{:.3f}"), column("rho_ctrl", "Control ρ", "{:.3f}"),
            column("layers_fav", "Layers favoring law"), column("F_all", "Median F (all pairs)", "{:.3f}"),
            column("bound_checked", "γ-bound checks passed"),
        ],
        rows=rows,
        notes="F_ij = 1 − ||T_iT_j − α_j T_i||²/||T_iT_j||² with α_j fitted on j alone; ρ_ij = β_ij/α_j. Control: the "
              "same query slot in the next KV group (– with one KV group). Models without shared values (MHA) have no row. "
              "||T_iT_j − aT_i||² ≤ γ_ij ||T_j² − aT_j||² is asserted for every pair at a ∈ {α_j, β_ij, 0}.",
    )


@table("p1_anchors", families=(HEADS, PAIRS), params=STRONG_THRESHOLD_PARAM | {"band": "paper1/band", "pools": "paper1/pools"})
def p1_anchors(paper1_pairs: dict, paper1_heads: dict, models: list[str], strong_threshold: float,
               band: dict | None = None, pools: dict | None = None) -> Table:
    """**Paper 1, value anchors.** Value anchors of strong heads (P ≥ {{ snakemake.params.strong_threshold
    }}): the squared cosine of T_h/α_h with the projector P_V onto span V, the oblique share, anchor
    against wrong-V, the same-layer retrieval rank of the trained V; and the left-zero band of strong
    sibling pairs: all strong pairs, and the band pairs by ``paper1.band.membership`` = {{
    snakemake.params.band.membership }} (explanation: P_iP_j ≈ P_i both ways, F_ij, F_ji ≥ {{
    snakemake.params.band.explanation }}; strong: every strong pair); ranges over models with at least
    {{ snakemake.params.band.min_pairs }} such pairs."""
    pairs, heads, threshold, band = paper1_pairs, paper1_heads, strong_threshold, band or {}
    explanation, min_pairs = band.get("explanation", 0.9), band.get("min_pairs", 10)
    membership = band.get("membership", "explanation")
    rows = []
    for m in models:
        s = model_rows(heads, m)
        P, an, anw, ob = (values(heads, k, s) for k in ("P", "anchor_cos2", "anchor_cos2_wrong_v", "oblique_share"))
        rank = values(heads, "retrieval_rank", s, np.int64)
        ncand = values(heads, "n_value_candidates", s, np.int64)
        strong = np.isfinite(P) & (P >= threshold) & np.isfinite(an)
        n_s = int(strong.sum())
        sw = strong & np.isfinite(anw)
        sp = model_rows(pairs, m)
        Pi, Pj, F, cos2 = (values(pairs, k, sp) for k in ("P_i", "P_j", "F", "cos2"))
        both = np.isfinite(Pi) & np.isfinite(Pj) & (Pi >= threshold) & (Pj >= threshold) & np.isfinite(F)
        law = band_pairs(pairs, sp, threshold, explanation, membership) if sp.any() else np.zeros(0, dtype=bool)
        n_law = int(law.sum()) // 2
        rows.append({
            "model": m, "strong": n_s, "anchor": finite_median(an[strong]), "oblique": finite_median(ob[strong]),
            "fav": count_of(int(np.sum(an[sw] > anw[sw])), int(sw.sum())),
            "rank1": count_of(int(np.sum(rank[strong] == 1)), n_s),
            "cands": int(np.max(ncand)) if ncand.size else None,
            "band_pairs": int(both.sum()) // 2, "band_cos2": finite_median(cos2[both]), "band_F": finite_median(F[both]),
            "band_lt08": share(cos2[both] < 0.8) if both.any() else NAN,
            "law_pairs": n_law, "law_products": int(law.sum()), "law_cos2": finite_median(cos2[law]),
            "law_F": finite_median(F[law]), "law_lt08": share(cos2[law] < 0.8) if law.any() else NAN,
            "law_counted": "yes" if n_law >= min_pairs else "no",
        })
    per_model = {r["model"]: r for r in rows}
    for label, members in pool_members(models, pools):
        part = [per_model[m] for m in members]
        counted = [r for r in part if r["law_pairs"] >= min_pairs]

        def range_of(key, counted=counted):
            v = [r[key] for r in counted if np.isfinite(r[key])]
            return f"{min(v):.3f} – {max(v):.3f}" if v else "–"

        rows.append({"model": label, "strong": sum(r["strong"] for r in part),
                     "law_pairs": sum(r["law_pairs"] for r in part), "law_products": sum(r["law_products"] for r in part),
                     "law_counted": f"{len(counted)} models", "law_cos2_range": range_of("law_cos2"),
                     "law_F_range": range_of("law_F"),
                     "law_lt08_min": 100 * min((r["law_lt08"] for r in counted if np.isfinite(r["law_lt08"])), default=NAN),
                     POOLED_MODELS: pooled_models(members)})
    return Table(
        columns=[
            column("model", "Model"), column("strong", "Strong"), column("anchor", "Median anchor cos²", "{:.3f}"),
            column("oblique", "Median oblique share", "{:.3f}"), column("fav", "Anchor > wrong-V"),
            column("rank1", "Trained V ranked 1"), column("cands", "Candidates"),
            column("band_pairs", "Strong sibling pairs"), column("band_cos2", "Median cos² (pairs)", "{:.3f}"),
            column("band_F", "Median P_iP_j ≈ P_i explanation", "{:.3f}"),
            column("band_lt08", "Share cos² < 0.8", "{:.3f}"),
            column("law_pairs", "Band pairs (both ways)"), column("law_products", "Directed products"),
            column("law_cos2", "Band median cos²", "{:.3f}"), column("law_F", "Band median explanation", "{:.3f}"),
            column("law_lt08", "Band share cos² < 0.8", "{:.3f}"), column("law_counted", f"≥ {min_pairs} band pairs"),
            column("law_cos2_range", "Band median cos² (range)"),
            column("law_F_range", "Band median explanation (range)"),
            column("law_lt08_min", "Band % cos² < 0.8 (smallest)", "{:.1f}"), column(POOLED_MODELS, "Pooled models"),
        ],
        rows=rows,
        notes="Oblique share = ||(I − P_V) O Vᵀ||²/||O Vᵀ||². Retrieval ranks every full-rank value factor of the layer "
              "(MHA: every head's V) by anchor cos². Band: unordered sibling pairs with both heads strong; explanation "
              "= 1 − ||P_iP_j − P_i||²/||P_iP_j||² = F_ij over both directed products. Band (both ways; "
              f"paper1.band.membership: {membership}): "
              + (f"strong pairs with F_ij ≥ {explanation:g} and F_ji ≥ {explanation:g} (P_iP_j ≈ P_i and P_jP_i ≈ P_j; "
                 "paper1.band.explanation)" if membership == "explanation" else
                 "every strong pair (both heads strong; no explanation threshold)")
              + f"; pooled ranges over models with at least {min_pairs} band pairs (paper1.band.min_pairs).",
    )


@figure("p1_fig_sibling_law", families=(PAIRS,), params=STRONG_THRESHOLD_PARAM)
def p1_fig_sibling_law(paper1_pairs: dict, models: list[str], strong_threshold: float):
    """**Paper 1, sibling law.** ECDFs of the fixed-gain explanation F_ij and the gain ratio ρ_ij against the
    next-group control (dashed)."""
    pairs = paper1_pairs
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, m in enumerate(models):
        s = model_rows(pairs, m)
        if not s.any():
            continue
        Pj = values(pairs, "P_j", s)
        right = np.isfinite(Pj) & (Pj >= strong_threshold)
        sel, tag = (right, "strong j") if right.any() else (np.ones_like(right), "all j")
        for a, key, ckey, (lo, hi) in ((ax, "F", "F_ctrl", F_RANGE), (ax2, "rho", "rho_ctrl", RHO_RANGE)):
            v, vc = np.clip(values(pairs, key, s)[sel], lo, hi), np.clip(values(pairs, ckey, s)[sel], lo, hi)
            x = np.sort(v[np.isfinite(v)])
            if x.size:
                a.step(x, np.arange(1, x.size + 1) / x.size, where="post", color=f"C{i}", label=f"{m} ({tag})")
            xc = np.sort(vc[np.isfinite(vc)])
            if xc.size:
                a.step(xc, np.arange(1, xc.size + 1) / xc.size, where="post", color=f"C{i}", ls="--",
                       label=f"{m} control")
    ax.set(xlabel=f"fixed-gain explanation F_ij (clipped to [{F_RANGE[0]:g}, {F_RANGE[1]:g}])", ylabel="ECDF",
           title="Sibling law F_ij vs next-group control (dashed)")
    ax2.set(xlabel=f"gain ratio ρ_ij = β_ij/α_j (clipped to [{RHO_RANGE[0]:g}, {RHO_RANGE[1]:g}])", ylabel="ECDF",
            title="Gain ratio vs control (dashed)")
    for a in (ax, ax2):
        a.axvline(1.0, color="k", lw=0.7, ls=":")
        if a.lines:
            a.legend(fontsize=6)
        else:
            a.text(0.5, 0.5, "no shared-value (GQA/MQA) pairs", ha="center", transform=a.transAxes)
    fig.tight_layout()
    return fig
