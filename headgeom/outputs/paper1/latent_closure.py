"""Paper 1's latent closure: P_I(K), support isotropy I_D conditional on it and the perturbation
split of preserved and reduced cores, against all and against layer-matched ordinary heads
(statistics in headgeom.methods.paper1.tail)."""

from __future__ import annotations

import numpy as np

from headgeom.core.stats import finite_median
from headgeom.methods.paper1.tail import latent_aurocs, latent_intervals, layer_matched, nonradial_response
from headgeom.outputs.formats import POOLED_MODELS, Table
from headgeom.outputs.paper1.common import (NAN, STRONG_THRESHOLD_PARAM, column, count_of, interval_columns,
                                            pooled_models, row_selections, table, values)
from headgeom.outputs.registry import HEADS


@table("p1_latent_closure", families=(HEADS,),
       params=STRONG_THRESHOLD_PARAM | {"bootstrap": "paper1/bootstrap", "large": "paper1/large_endpoints",
                                        "pools": "paper1/pools"})
def p1_latent_closure(paper1_heads: dict, models: list[str], strong_threshold: float, bootstrap: int = 0,
                      large: tuple = (), pools: dict | None = None) -> Table:
    """**Paper 1, latent closure.** Latent closure P_I(K) after isoclinic normalization, support isotropy I_D
    conditional on it, and the perturbation split (a, b, w) of preserved and reduced cores (t = {{
    snakemake.params.strong_threshold }}); both AUROCs also against layer-matched ordinary heads (the
    large-endpoint design; row "pooled large" over ``paper1.large_endpoints``), with model/layer-clustered
    bootstrap 95% intervals ({{ snakemake.params.bootstrap }} replicates)."""
    heads, t, n_boot = paper1_heads, strong_threshold, int(bootstrap or 0)
    rows = []
    selections = row_selections(heads, models, pools)
    large = [m for m in large if m in models]
    if large:
        selections.append(("pooled large", np.isin(np.asarray(heads.get("model", [])), large), large))
    for m, s, members in selections:
        P, PL, ID, a, b, w2 = (values(heads, k, s) for k in ("P", "P_latent", "I_D", "split_a", "split_b", "split_w2"))
        strong = np.isfinite(P) & (P >= t)
        au_lat, au_id, n_lat, n_pres, n_red = latent_aurocs(P, PL, ID, t)
        lm = layer_matched(heads, s, t) if s.any() else np.zeros(0, dtype=bool)
        P_matched = np.where((strong | lm) & np.isfinite(PL), P, NAN)
        au_lat_lm, au_id_lm, _, n_pres_lm, n_red_lm = latent_aurocs(P_matched, PL, ID, t)
        ci = latent_intervals(heads, s, m, P, P_matched, PL, ID, t, n_boot)
        lat = np.isfinite(PL) & (PL >= t)
        pres, red = lat & (P >= t), lat & (P < t)
        rows.append({
            "model": m, POOLED_MODELS: pooled_models(members), "strong": int(strong.sum()),
            "strong_latent": count_of(int(np.sum(strong & (PL >= t))), int(strong.sum())),
            "latent_median_strong": finite_median(PL[strong]), "auroc_latent": au_lat,
            "latent_n": n_lat, "preserved": n_pres, "reduced": n_red, "auroc_ID": au_id,
            "ID_pres": finite_median(ID[pres]), "ID_red": finite_median(ID[red]),
            "absb_pres": finite_median(np.abs(b[pres])), "absb_red": finite_median(np.abs(b[red])),
            "w2_pres": finite_median(w2[pres]), "w2_red": finite_median(w2[red]), "a_red": finite_median(a[red]),
            **nonradial_response(PL, P, a, b, w2, pres, red),
            "matched": int(lm.sum()), "auroc_latent_lm": au_lat_lm, "auroc_ID_lm": au_id_lm,
            "preserved_lm": n_pres_lm, "reduced_lm": n_red_lm,
            **{f"{k}_{e}": ci.get(k, (NAN, NAN))[i] for k in ("lat", "id", "lat_lm", "id_lm") for i, e in enumerate(("lo", "hi"))},
        })
    return Table(
        columns=[
            column("model", "Model"), column("strong", "Strong"), column("strong_latent", "Strong with P_I≥t"),
            column("latent_median_strong", "Median P_I (strong)", "{:.3f}"), column("auroc_latent", "AUROC P_I", "{:.3f}"),
            column("latent_n", "P_I≥t"), column("preserved", "Preserved"), column("reduced", "Reduced"),
            column("auroc_ID", "AUROC I_D given P_I", "{:.3f}"),
            column("ID_pres", "I_D pres.", "{:.3f}"), column("ID_red", "I_D red.", "{:.3f}"),
            column("absb_pres", "abs(b) pres.", "{:.3g}"), column("absb_red", "abs(b) red.", "{:.3g}"),
            column("w2_pres", "‖w‖² pres.", "{:.3g}"), column("w2_red", "‖w‖² red.", "{:.3g}"),
            column("a_red", "a red.", "{:.3g}"),
            column("nonradial_pres", "b²+‖w‖² pres.", "{:.3g}"), column("nonradial_red", "b²+‖w‖² red.", "{:.3g}"),
            column("nonradial_diff", "b²+‖w‖² red. − pres.", "{:.3g}"),
            column("leak_share_red", "Leakage share of reduction", "{:.3f}"),
            *interval_columns("lat_lo", "lat_hi", "AUROC P_I"),
            *interval_columns("id_lo", "id_hi", "AUROC I_D"),
            column("matched", "Layer-matched ordinary"), column("auroc_latent_lm", "AUROC P_I (layer-matched)", "{:.3f}"),
            column("preserved_lm", "Preserved (strong + matched)"), column("reduced_lm", "Reduced (strong + matched)"),
            column("auroc_ID_lm", "AUROC I_D given P_I (layer-matched)", "{:.3f}"),
            *interval_columns("lat_lm_lo", "lat_lm_hi", "AUROC P_I l.-m."),
            *interval_columns("id_lm_lo", "id_lm_hi", "AUROC I_D l.-m."),
            column(POOLED_MODELS, "Pooled models"),
        ],
        rows=rows,
        notes="Preserved: P_I ≥ t and P ≥ t; reduced: P_I ≥ t and P < t. "
              "P = ((1+a)s + b√(1-s²))² / ((1+a)² + b² + ||w||²), s = √P_I (asserted per head). "
              "b²+‖w‖²: the nonradial response (medians). Leakage share: per reduced core, (P_w=0 − P) / (P_I − P), "
              "the part of its closure loss that w alone removes (P_w=0: the same with w = 0), median. "
              "Layer-matched: strong heads against as many hash-chosen ordinary heads of the same layers (the capacity "
              "job's choice); the I_D AUROC is then taken over strong + matched heads. 95% intervals: bootstrap "
              "resampling models, then complete layers within them (paper1.bootstrap replicates). "
              "Pooled: every active model; pooled <name>: the active models of paper1.pools' <name>; "
              "pooled large: those of paper1.large_endpoints.",
    )
