"""Paper 1 (Feng & Li, *Scaled Idempotence in Transformer Attention*): every table and figure,
each builder registered by the decorator above it (headgeom.outputs.registry; its docstring is
the caption), from the paper 1 shards (``paper1_heads``, ``paper1_pairs``, ``paper1_capacity``)
and the activation stage's ``activation_natural_return``:

  p1_table2_strong_tail        strong tail per model (Table 2) with the threshold-sweep ends and g_T checks
  p1_table3_trajectories       P, R, Cap_hat, E per checkpoint for the final-defined groups (Table 3)
  p1_table4_sibling_law        shared-value sibling law with the next-group control (Table 4)
  p1_threshold_sweep           tail, controls and the two AUROCs per threshold
  p1_orientation_scramble      orientation scramble and Haar audit per model
  p1_orientation_layers        per layer: scramble shares, median differences, factorial endpoint
  p1_orientation_rank_audit    numerical rank of every participating O/V factor
  p1_factorial                 factorial D x K per model, real minus wrong-V control
  p1_capacity                  feasible capacity / attainment of strong, matched and hash-sampled heads
  p1_latent_closure            latent closure, I_D conditional on it, perturbation split of reduced cores
  p1_anchors                   value anchors, retrieval rank, left-zero band of strong sibling pairs
  p1_activations_natural_return  natural return on real text (§Activations)
Figures: p1_fig_closure_ccdf, p1_fig_orientation_scramble, p1_fig_capacity, p1_fig_sibling_law,
p1_fig_activations_natural_return."""

from __future__ import annotations


from functools import partial

import numpy as np

from headgeom.methods.natural_return import population
from headgeom.core.errors import ConfigError
from headgeom.core.seeds import rng_for
from headgeom.core.stats import auroc, cluster_bootstrap, hierarchical_bootstrap
from headgeom.methods.paper1 import BOOTSTRAP
from headgeom.methods.paper1.capacity import capacity_selection
from headgeom.outputs.formats import POOLED_MODELS, Column, Table, finite_quantile, nanstat, pyplot, step_ccdf, tex_escape
from headgeom.outputs.registry import HEADS, decorators

table, figure = decorators("Paper 1")
PAIRS, CAP, NAT = "paper1_pairs", "paper1_capacity", "activation_natural_return"
ST = {"strong_threshold": "tables/strong_threshold"}

# Header characters headgeom.outputs.formats.tex_escape leaves alone, made LaTeX-safe (captions avoid them).
_LATEX = (("²", "$^2$"), ("‖", r"$\|$"), ("≈", r"$\approx$"), ("−", "-"), ("≠", r"$\neq$"), ("<", "$<$"),
          (">", "$>$"), ("|", "$|$"))


def _C(key: str, header: str, fmt: str = "{}") -> Column:
    tex = tex_escape(header)
    for a, b in _LATEX:
        tex = tex.replace(a, b)
    return Column(key, header, fmt, latex=tex)

NAN = float("nan")


# ------------------------------------------------------------------ helpers


def _a(cols, key, sel=None, dtype=float):
    x = np.asarray(cols[key]) if key in cols else np.array([])
    if dtype is not None and x.dtype != object:
        x = x.astype(dtype)
    return x if sel is None else x[sel]


# NaN-skipping reducers (NaN when nothing finite is left)
_med, _mean, _max, _min = (partial(nanstat, f) for f in (np.median, np.mean, np.max, np.min))


def _frac(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "–"


def _share(mask) -> float:
    mask = np.asarray(mask, dtype=bool)
    return float(mask.mean()) if mask.size else NAN


def _model_sel(cols, m):
    if not cols or "model" not in cols:
        return np.zeros(0, dtype=bool)
    return np.asarray(cols["model"]) == m


def _stack(obj_col) -> np.ndarray:
    """List column (object array of arrays) -> 2-D float array (rows, draws)."""
    rows = [np.asarray(v, dtype=float) for v in obj_col]
    if not rows:
        return np.zeros((0, 0))
    n = max(r.size for r in rows)
    out = np.full((len(rows), n), np.nan)
    for i, r in enumerate(rows):
        out[i, : r.size] = r
    return out


def _sweep_values(sweep) -> list[float]:
    return [float(t) for t in sweep]


# ------------------------------------------------------------------ Table 2


def strong_tail(P, Pw, alpha, g, threshold: float) -> dict:
    """The per-model strong-tail statistics paper 1's Table 2 reports."""
    defined = np.isfinite(P)
    strong = defined & (P >= threshold)
    n_strong = int(strong.sum())
    return {
        "defined": defined, "strong_mask": strong, "n_defined": int(defined.sum()), "strong": n_strong,
        "wrong_v_median": nanstat(np.median, Pw),
        "wrong_v_max": nanstat(np.max, Pw),
        "neg_alpha_share": float(np.mean(alpha[strong] < 0)) if n_strong else float("nan"),
        "gT_median_strong": nanstat(np.median, g[strong]),
        "gT_min_strong": nanstat(np.min, g[strong]),
        "gT_median_all": nanstat(np.median, g),
    }



@table("p1_table2_strong_tail", families=(HEADS,), params=ST | {"sweep": "paper1/sweep"},
       headlines=(("strong", "strong heads (closure P above the threshold)"), ("strong_pct", "strong heads, % of heads"),
                  ("gT_med", "return gain g_T, median over strong heads"),
                  ("wrong_v_median", "median P with the wrong V (control)")))
def p1_table2_strong_tail(paper1_heads: dict, models: list[str], strong_threshold: float, sweep) -> Table:
    """**Paper 1, Table 2.** Strong closure tail per model with the cyclic wrong-V control and return gain g_T
    (t = {{ snakemake.params.strong_threshold }}; sweep ends {{ snakemake.params.sweep|first }} and {{
    snakemake.params.sweep|last }})."""
    heads, threshold = paper1_heads, strong_threshold
    sweep = _sweep_values(sweep)
    t_lo, t_hi = min(sweep), max(sweep)
    rows = []
    for m in models:
        s = _model_sel(heads, m)
        P, Pw, alpha, g = (_a(heads, k, s) for k in ("P", "P_wrong_v", "alpha", "g_T"))
        st = strong_tail(P, Pw, alpha, g, threshold)
        defined, strong = st["defined"], st["strong_mask"]
        n_def, n_s = st["n_defined"], st["strong"]
        rows.append({
            "model": m, "layers": int(np.unique(_a(heads, "layer", s)).size), "heads": int(s.sum()),
            "undefined": int(s.sum()) - n_def,  # NaN P (non-finite or zero T): out of every percentage
            "strong_pct": 100.0 * n_s / n_def if n_def else NAN, "strong": n_s,
            "wrong_v_median": st["wrong_v_median"], "wrong_v_max": st["wrong_v_max"],
            "wrong_v_at_lowest": int(np.sum(np.isfinite(Pw) & (Pw >= t_lo))) if np.isfinite(Pw).any() else None,
            "tail_lo_pct": 100.0 * np.sum(defined & (P >= t_lo)) / n_def if n_def else NAN,
            "tail_hi_pct": 100.0 * np.sum(defined & (P >= t_hi)) / n_def if n_def else NAN,
            "neg_alpha": st["neg_alpha_share"],
            "gT_med": st["gT_median_strong"], "gT_min": st["gT_min_strong"],
            "gT_above_all_median": _frac(int(np.sum(g[strong] > st["gT_median_all"])), n_s),
            "gT_below_001": int(np.sum(g[strong] < 0.01)),
        })
    return Table(
        name="p1_table2_strong_tail",
        caption=f"Strong closure tail (P ≥ {threshold:g}) per model with the cyclic wrong-V control and return gain g_T.",
        columns=[
            _C("model", "Model"), _C("layers", "Layers"), _C("heads", "Heads"), _C("undefined", "Undefined"),
            _C("strong_pct", "% P≥t", "{:.2f}"), _C("strong", "Count"),
            _C("wrong_v_median", "Wrong-V median", "{:.2e}"), _C("wrong_v_max", "Wrong-V max", "{:.3g}"),
            _C("wrong_v_at_lowest", f"Wrong-V ≥ {t_lo:g}"),
            _C("tail_lo_pct", f"% P≥{t_lo:g}", "{:.2f}"), _C("tail_hi_pct", f"% P≥{t_hi:g}", "{:.2f}"),
            _C("neg_alpha", "Neg. α share (strong)", "{:.2f}"),
            _C("gT_med", "g_T median (strong)", "{:.3g}"), _C("gT_min", "g_T min (strong)", "{:.3g}"),
            _C("gT_above_all_median", "Strong g_T > all-head median"),
            _C("gT_below_001", "Strong g_T < 0.01"),
        ],
        rows=rows,
        notes="t = tables.strong_threshold. Wrong-V pairs O_h with the next KV group's V (MHA: V_{h+1}); "
              "it is undefined (–) with one KV group. g_T = ||T²||/||T||.",
    )


# ------------------------------------------------------------------ threshold sweep / latent


def _latent_aurocs(P, PL, ID, t):
    defined = np.isfinite(P) & np.isfinite(PL)
    strong = defined & (P >= t)
    au_lat = auroc(PL[strong], PL[defined & ~strong])
    lat = defined & (PL >= t) & np.isfinite(ID)
    pres, red = lat & (P >= t), lat & (P < t)
    au_id = auroc(ID[pres], ID[red])
    return au_lat, au_id, int(lat.sum()), int(pres.sum()), int(red.sum())


def _tie_groups(sorted_vals: np.ndarray) -> np.ndarray:
    """Group index of each value of a sorted array (equal values share one)."""
    g = np.zeros(sorted_vals.size, dtype=np.int64)
    if sorted_vals.size > 1:
        g[1:] = np.cumsum(sorted_vals[1:] != sorted_vals[:-1])
    return g


def _mann_whitney(g: np.ndarray, pos, neg) -> float:
    """AUROC of the rows marked pos against those marked neg, rows in sorted score order with tie
    groups g: (Σ_pos #neg below + ½ #neg tied) / (n_pos n_neg); NaN if a class is empty."""
    n_pos, n_neg = int(pos.sum()), int(neg.sum())
    if not n_pos or not n_neg:
        return NAN
    nc = np.bincount(g[neg], minlength=int(g[-1]) + 1).astype(float)
    below = np.cumsum(nc) - nc
    return float(np.sum(below[g[pos]] + 0.5 * nc[g[pos]]) / (n_pos * n_neg))


def sweep_aurocs(P, PL, ID, ts) -> list[float]:
    """[AUROC P_I (t_0), AUROC I_D given P_I (t_0), AUROC P_I (t_1), ...]: the two AUROCs of
    ``_latent_aurocs`` at every threshold, from one sort of each score (the bootstrap's statistic;
    rankdata per threshold would sort 2 x len(ts) times per replicate)."""
    d = np.isfinite(P) & np.isfinite(PL)
    P, PL, ID = P[d], PL[d], ID[d]
    fid = np.isfinite(ID)
    o1 = np.argsort(PL, kind="stable")
    o2 = np.argsort(np.where(fid, ID, np.inf), kind="stable")
    g1, g2 = _tie_groups(PL[o1]), _tie_groups(np.where(fid, ID, np.inf)[o2])
    out = []
    for t in ts:
        pos = P >= t
        out.append(_mann_whitney(g1, pos[o1], ~pos[o1]))
        lat = (PL >= t) & fid
        out.append(_mann_whitney(g2, (lat & pos)[o2], (lat & ~pos)[o2]))
    return out


def _sweep_intervals(heads: dict, s, m: str, P, PL, ID, ts: list[float], n_boot: int) -> dict:
    """{t: (lat_lo, lat_hi, id_lo, id_hi)}: model/layer-clustered percentile intervals of the two
    AUROCs at every threshold, all from the same replicates (resampling models, then complete
    layers within them; core.stats.cluster_bootstrap)."""
    if not n_boot or not s.any():
        return {t: (NAN,) * 4 for t in ts}

    lo, hi = cluster_bootstrap(lambda ix: sweep_aurocs(P[ix], PL[ix], ID[ix], ts), _clusters(heads, s), n_boot,
                               rng_for(m, -1, -1, 0, BOOTSTRAP + "-sweep"))
    lo, hi = np.atleast_1d(lo), np.atleast_1d(hi)
    return {t: (lo[2 * k], hi[2 * k], lo[2 * k + 1], hi[2 * k + 1]) for k, t in enumerate(ts)}


@table("p1_threshold_sweep", families=(HEADS,), params={"sweep": "paper1/sweep", "bootstrap": "paper1/bootstrap"})
def p1_threshold_sweep(paper1_heads: dict, models: list[str], sweep, bootstrap: int = 0) -> Table:
    """**Paper 1, threshold sweep.** Tail size, controls reaching t, and the latent-closure and I_D AUROCs at
    each threshold of ``paper1.sweep``, with model/layer-clustered bootstrap 95% intervals ({{
    snakemake.params.bootstrap }} replicates, ``paper1.bootstrap``)."""
    heads, n_boot = paper1_heads, int(bootstrap or 0)
    rows = []
    groups = [(m, _model_sel(heads, m)) for m in models]
    if len(models) > 1:
        groups.append(("pooled", np.isin(np.asarray(heads.get("model", [])), models)))
    ts = _sweep_values(sweep)
    for m, s in groups:
        P, Pw, PL, ID = (_a(heads, k, s) for k in ("P", "P_wrong_v", "P_latent", "I_D"))
        scr = _stack(_a(heads, "P_scramble", s, None))
        haar = _stack(_a(heads, "P_haar", s, None))
        n_def = int(np.isfinite(P).sum())
        ci = _sweep_intervals(heads, s, m, P, PL, ID, ts, n_boot)
        for t in ts:
            au_lat, au_id, n_lat, n_pres, n_red = _latent_aurocs(P, PL, ID, t)
            lat_lo, lat_hi, id_lo, id_hi = ci[t]
            rows.append({
                "model": m, "t": t, "strong": int(np.sum(np.isfinite(P) & (P >= t))),
                "strong_pct": 100.0 * np.sum(np.isfinite(P) & (P >= t)) / n_def if n_def else NAN,
                "wrong_v": int(np.sum(np.isfinite(Pw) & (Pw >= t))) if np.isfinite(Pw).any() else None,
                "scramble": int(np.sum(np.isfinite(scr) & (scr >= t))), "haar": int(np.sum(np.isfinite(haar) & (haar >= t))),
                "auroc_latent": au_lat, "latent_n": n_lat, "preserved": n_pres, "reduced": n_red, "auroc_ID": au_id,
                "lat_lo": lat_lo, "lat_hi": lat_hi, "id_lo": id_lo, "id_hi": id_hi,
            })
    return Table(
        name="p1_threshold_sweep",
        caption="Threshold sweep: tail size, controls reaching t, AUROC of latent closure (strong vs ordinary at t) and of "
                "I_D among heads with latent closure ≥ t (preserved vs reduced at t).",
        columns=[
            _C("model", "Model"), _C("t", "t", "{:.3f}"), _C("strong", "P≥t"), _C("strong_pct", "%", "{:.2f}"),
            _C("wrong_v", "Wrong-V ≥ t"), _C("scramble", "Scramble draws ≥ t"), _C("haar", "Haar draws ≥ t"),
            _C("auroc_latent", "AUROC P_I", "{:.3f}"), _C("latent_n", "P_I≥t"),
            _C("preserved", "Preserved"), _C("reduced", "Reduced"), _C("auroc_ID", "AUROC I_D given P_I", "{:.3f}"),
            _C("lat_lo", "AUROC P_I 95% lo", "{:.3f}"), _C("lat_hi", "hi", "{:.3f}"),
            _C("id_lo", "AUROC I_D 95% lo", "{:.3f}"), _C("id_hi", "hi", "{:.3f}"),
        ],
        rows=rows,
        notes="AUROC = P(score of positive > negative) + ½ P(tie); – when a class is empty. 95% intervals: "
              "model/layer-clustered percentile bootstrap (resampling models, then complete layers within them; "
              "paper1.bootstrap replicates, every threshold from the same replicates; – with 0 replicates).",
    )


def layer_matched(heads: dict, s, threshold: float) -> np.ndarray:
    """Layer-matched ordinary heads of the selected rows: in every layer, as many heads with
    P < t as the layer has strong heads, hash-chosen exactly as the capacity job chooses them
    (methods.paper1.capacity.capacity_selection), so with no strong head a layer adds none."""
    idx = np.flatnonzero(s)
    out = np.zeros(idx.size, dtype=bool)
    mod = np.asarray(heads["model"])[idx]
    lay = _a(heads, "layer", None, np.int64)[idx]
    head = _a(heads, "head", None, np.int64)[idx]
    P = _a(heads, "P", None)[idx]
    PL = _a(heads, "P_latent", None)[idx]
    for key in dict.fromkeys(zip(mod.tolist(), lay.tolist())):
        rows = np.flatnonzero((mod == key[0]) & (lay == key[1]))
        H = int(head[rows].max()) + 1
        Ph, valid = np.full(H, np.nan), np.zeros(H, dtype=bool)
        Ph[head[rows]] = P[rows]
        valid[head[rows]] = np.isfinite(P[rows]) & np.isfinite(PL[rows])
        _, matched, _ = capacity_selection(Ph, valid, threshold, key[0], key[1], 0)
        out[rows] = matched[head[rows]]
    return out


def _clusters(heads: dict, s) -> list[list[np.ndarray]]:
    """Row positions (within the selection) grouped by model, then by layer."""
    mod = np.asarray(heads["model"])[s]
    lay = _a(heads, "layer", s, np.int64)
    return [[np.flatnonzero((mod == m) & (lay == L)) for L in np.unique(lay[mod == m])] for m in dict.fromkeys(mod.tolist())]


@table("p1_latent_closure", families=(HEADS,),
       params=ST | {"bootstrap": "paper1/bootstrap", "large": "paper1/large_endpoints", "pools": "paper1/pools"})
def p1_latent_closure(paper1_heads: dict, models: list[str], strong_threshold: float, bootstrap: int = 0,
                      large: tuple = (), pools: dict | None = None) -> Table:
    """**Paper 1, latent closure.** Latent closure P_I(K) after isoclinic normalization, support isotropy I_D
    conditional on it, and the perturbation split (a, b, w) of preserved and reduced cores; both AUROCs
    also against layer-matched ordinary heads (the large-endpoint design; row "pooled large" over
    ``paper1.large_endpoints``), with model/layer-clustered bootstrap 95% intervals ({{
    snakemake.params.bootstrap }} replicates)."""
    # Per model (+ pooled; + "pooled large" over ``large`` when given): latent closure and I_D
    # AUROCs against all heads and against layer-matched ordinary heads (the paper's large-endpoint
    # design), with model/layer-clustered bootstrap 95% intervals (n_boot replicates; 0: none).
    heads, threshold, n_boot = paper1_heads, strong_threshold, int(bootstrap or 0)
    rows = []
    groups = _groups_pooled(heads, models, pools)
    large = [m for m in large if m in models]
    if large:
        groups.append(("pooled large", np.isin(np.asarray(heads.get("model", [])), large), large))
    t = threshold
    for m, s, members in groups:
        P, PL, ID, a, b, w2 = (_a(heads, k, s) for k in ("P", "P_latent", "I_D", "split_a", "split_b", "split_w2"))
        strong = np.isfinite(P) & (P >= t)
        au_lat, au_id, n_lat, n_pres, n_red = _latent_aurocs(P, PL, ID, t)
        lm = layer_matched(heads, s, t) if s.any() else np.zeros(0, dtype=bool)
        pop = (strong | lm) & np.isfinite(PL)
        au_lat_lm, au_id_lm, _, n_pres_lm, n_red_lm = _latent_aurocs(np.where(pop, P, NAN), PL, ID, t)
        ci = {}
        if n_boot and s.any():
            cl = _clusters(heads, s)
            rng = rng_for(m, -1, -1, 0, BOOTSTRAP + "-latent")
            for key, pp in (("lat", P), ("lat_lm", np.where(pop, P, NAN))):
                lo, hi = cluster_bootstrap(lambda ix, pp=pp: _latent_aurocs(pp[ix], PL[ix], ID[ix], t)[:2], cl, n_boot, rng)
                ci[key], ci["id" + key[3:]] = (lo[0], hi[0]), (lo[1], hi[1])
        lat = np.isfinite(PL) & (PL >= t)
        pres, red = lat & (P >= t), lat & (P < t)
        rows.append({
            "model": m, POOLED_MODELS: _pooled_models(members), "strong": int(strong.sum()),
            "strong_latent": _frac(int(np.sum(strong & (PL >= t))), int(strong.sum())),
            "latent_median_strong": _med(PL[strong]), "auroc_latent": au_lat,
            "latent_n": n_lat, "preserved": n_pres, "reduced": n_red, "auroc_ID": au_id,
            "ID_pres": _med(ID[pres]), "ID_red": _med(ID[red]),
            "absb_pres": _med(np.abs(b[pres])), "absb_red": _med(np.abs(b[red])),
            "w2_pres": _med(w2[pres]), "w2_red": _med(w2[red]), "a_red": _med(a[red]),
            **_nonradial(PL, P, a, b, w2, pres, red),
            "matched": int(lm.sum()), "auroc_latent_lm": au_lat_lm, "auroc_ID_lm": au_id_lm,
            "preserved_lm": n_pres_lm, "reduced_lm": n_red_lm,
            **{f"{k}_{e}": ci.get(k, (NAN, NAN))[i] for k in ("lat", "id", "lat_lm", "id_lm") for i, e in enumerate(("lo", "hi"))},
        })
    return Table(
        name="p1_latent_closure",
        caption=f"Latent closure P_I(K), support isotropy I_D conditional on it, and the perturbation split (a, b, w) "
                f"of preserved vs reduced cores (t = {t:g}).",
        columns=[
            _C("model", "Model"), _C("strong", "Strong"), _C("strong_latent", "Strong with P_I≥t"),
            _C("latent_median_strong", "Median P_I (strong)", "{:.3f}"), _C("auroc_latent", "AUROC P_I", "{:.3f}"),
            _C("latent_n", "P_I≥t"), _C("preserved", "Preserved"), _C("reduced", "Reduced"),
            _C("auroc_ID", "AUROC I_D given P_I", "{:.3f}"),
            _C("ID_pres", "I_D pres.", "{:.3f}"), _C("ID_red", "I_D red.", "{:.3f}"),
            _C("absb_pres", "abs(b) pres.", "{:.3g}"), _C("absb_red", "abs(b) red.", "{:.3g}"),
            _C("w2_pres", "‖w‖² pres.", "{:.3g}"), _C("w2_red", "‖w‖² red.", "{:.3g}"),
            _C("a_red", "a red.", "{:.3g}"),
            _C("nonradial_pres", "b²+‖w‖² pres.", "{:.3g}"), _C("nonradial_red", "b²+‖w‖² red.", "{:.3g}"),
            _C("nonradial_diff", "b²+‖w‖² red. − pres.", "{:.3g}"), _C("leak_share_red", "Leakage share of reduction", "{:.3f}"),
            _C("lat_lo", "AUROC P_I 95% lo", "{:.3f}"), _C("lat_hi", "hi", "{:.3f}"),
            _C("id_lo", "AUROC I_D 95% lo", "{:.3f}"), _C("id_hi", "hi", "{:.3f}"),
            _C("matched", "Layer-matched ordinary"), _C("auroc_latent_lm", "AUROC P_I (layer-matched)", "{:.3f}"),
            _C("preserved_lm", "Preserved (strong + matched)"), _C("reduced_lm", "Reduced (strong + matched)"),
            _C("auroc_ID_lm", "AUROC I_D given P_I (layer-matched)", "{:.3f}"),
            _C("lat_lm_lo", "AUROC P_I l.-m. 95% lo", "{:.3f}"), _C("lat_lm_hi", "hi", "{:.3f}"),
            _C("id_lm_lo", "AUROC I_D l.-m. 95% lo", "{:.3f}"), _C("id_lm_hi", "hi", "{:.3f}"),
            _C(POOLED_MODELS, "Pooled models"),
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


def _nonradial(PL, P, a, b, w2, pres, red) -> dict:
    """The nonradial response b² + ‖w‖² of preserved and reduced cores (medians, and reduced minus
    preserved), and the median share of a reduced core's closure loss P_I − P that its off-plane
    leakage w accounts for: (P_w=0 − P) / (P_I − P), P_w=0 the closure with w set to 0."""
    nr = b ** 2 + w2
    s = np.sqrt(np.clip(PL, 0.0, 1.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        p_nw = ((1 + a) * s + b * np.sqrt(1 - s ** 2)) ** 2 / ((1 + a) ** 2 + b ** 2)
        share = (p_nw - P) / (PL - P)
    return {"nonradial_pres": _med(nr[pres]), "nonradial_red": _med(nr[red]),
            "nonradial_diff": _med(nr[red]) - _med(nr[pres]), "leak_share_red": _med(share[red])}


# ------------------------------------------------------------------ scrambles and layers


def _scramble_stats(P, R, RH, strong):
    ok = np.isfinite(P) & np.isfinite(R)
    okh = np.isfinite(P) & np.isfinite(RH)
    ex = ok & ~strong
    return {
        "n": int(ok.sum()),
        "beat": int(np.sum(ok & (P > R))),
        "diff": _med((P - R)[ok]),
        "n_ex": int(ex.sum()), "beat_ex": int(np.sum(ex & (P > R))), "diff_ex": _med((P - R)[ex]),
        "n_h": int(okh.sum()), "beat_h": int(np.sum(okh & (P > RH))), "diff_h": _med((P - RH)[okh]),
    }


def _pools(models: list[str], pools: dict | None) -> list[tuple[str, list[str]]]:
    """A table's pooled rows and their models: ("pooled", every active model) with two or more, then
    ("pooled <name>", the pool's active models) for each pool of ``paper1.pools`` with any."""
    out = [("pooled", list(models))] if len(models) > 1 else []
    for name, members in (pools or {}).items():
        present = [m for m in members if m in models]
        if present:
            out.append((f"pooled {name}", present))
    return out


def _groups_pooled(cols: dict, models: list[str], pools: dict | None = None) -> list[tuple[str, np.ndarray, list]]:
    """(row label, selection, models pooled) per model (nothing pooled), then per pooled row (_pools)."""
    groups = [(m, _model_sel(cols, m), []) for m in models]
    mod = np.asarray(cols.get("model", []))
    return groups + [(label, np.isin(mod, members), members) for label, members in _pools(models, pools)]


def _pooled_models(members: list) -> str | None:
    return ", ".join(members) if members else None


def _layer_keys(cols: dict, s) -> np.ndarray:
    """One integer per (model, layer) of the selected rows (layers of different models differ)."""
    mod = np.asarray(cols["model"])[s] if "model" in cols else np.array([])
    lay = _a(cols, "layer", s, np.int64)
    keys = {k: i for i, k in enumerate(dict.fromkeys(zip(mod.tolist(), lay.tolist())))}
    return np.array([keys[k] for k in zip(mod.tolist(), lay.tolist())], dtype=np.int64)


@table("p1_orientation_scramble", families=(HEADS,), params=ST | {"pools": "paper1/pools"})
def p1_orientation_scramble(paper1_heads: dict, models: list[str], strong_threshold: float,
                            pools: dict | None = None) -> Table:
    """**Paper 1, orientation scramble.** Trained closure against signed-permutation scrambles and the Haar
    audit of K (singular values, D and spans fixed); the scramble draws evaluated (heads × draws)."""
    heads, threshold = paper1_heads, strong_threshold
    rows = []
    for m, s, members in _groups_pooled(heads, models, pools):
        P, R, RH, sv = (_a(heads, k, s) for k in ("P", "R_scramble", "R_haar", "sv_relerr"))
        layer = _layer_keys(heads, s)
        scr = _stack(_a(heads, "P_scramble", s, None))
        haar = _stack(_a(heads, "P_haar", s, None))
        strong = np.isfinite(P) & (P >= threshold)
        st = _scramble_stats(P, R, RH, strong)
        lay_pos, lay_pos_h, n_lay = 0, 0, 0
        for L in np.unique(layer):
            sl = layer == L
            ls = _scramble_stats(P[sl], R[sl], RH[sl], strong[sl])
            if ls["n"]:
                n_lay += 1
                lay_pos += int(ls["diff"] > 0)
                lay_pos_h += int(ls["diff_h"] > 0)
        rows.append({
            "model": m, "heads": st["n"], "P_median": _med(P[np.isfinite(R)]), "scr_median": _med(scr),
            "beat": _frac(st["beat"], st["n"]), "beat_pct": 100.0 * st["beat"] / st["n"] if st["n"] else NAN,
            "diff": st["diff"], "layers_pos": _frac(lay_pos, n_lay),
            "beat_ex": _frac(st["beat_ex"], st["n_ex"]),
            "beat_ex_pct": 100.0 * st["beat_ex"] / st["n_ex"] if st["n_ex"] else NAN, "diff_ex": st["diff_ex"],
            "draws": int(np.isfinite(scr).sum()),
            "scr_max": _max(scr), "scr_085": int(np.sum(np.isfinite(scr) & (scr >= 0.85))),
            "haar_median": _med(haar), "beat_h_pct": 100.0 * st["beat_h"] / st["n_h"] if st["n_h"] else NAN,
            "diff_h": st["diff_h"], "layers_pos_h": _frac(lay_pos_h, n_lay), "sv_max": _max(sv),
            POOLED_MODELS: _pooled_models(members),
        })
    return Table(
        name="paper1_scramble",
        caption="Orientation scramble K' = P_L K P_R (signed permutations) and Haar audit, D fixed: trained closure "
                "against the median of each head's draws.",
        columns=[
            _C("model", "Model"), _C("heads", "Heads"), _C("P_median", "Median P", "{:.3g}"),
            _C("scr_median", "Median scramble", "{:.2e}"), _C("beat", "P > R"), _C("beat_pct", "%", "{:.2f}"),
            _C("diff", "Median P−R", "{:.3g}"), _C("layers_pos", "Layers median P−R > 0"),
            _C("beat_ex", "P > R (non-strong)"), _C("beat_ex_pct", "% (non-strong)", "{:.2f}"),
            _C("diff_ex", "Median P−R (non-strong)", "{:.3g}"),
            _C("draws", "Scramble draws"), _C("scr_max", "Max scramble", "{:.3g}"), _C("scr_085", "Scrambles ≥ 0.85"),
            _C("haar_median", "Median Haar", "{:.2e}"), _C("beat_h_pct", "% P > Haar median", "{:.2f}"),
            _C("diff_h", "Median P−R_Haar", "{:.3g}"), _C("layers_pos_h", "Layers Haar diff > 0"),
            _C("sv_max", "Max sv rel. err", "{:.1e}"), _C(POOLED_MODELS, "Pooled models"),
        ],
        rows=rows,
        notes="R = median of the head's signed-permutation draws (R_Haar: of its Haar draws). Singular values of K "
              "are preserved in every draw (asserted; max relative error shown). Pooled: every head of the active "
              "models (medians over all heads / draws; layers counted per model); pooled <name>: those of the "
              "active models of paper1.pools' <name>.",
    )


@table("p1_orientation_layers", families=(HEADS,), params=ST)
def p1_orientation_layers(paper1_heads: dict, models: list[str], strong_threshold: float) -> Table:
    """**Paper 1, per layer.** Per layer: scramble shares and median differences, Haar differences and the
    factorial D×K endpoint with its wrong-V control."""
    heads, threshold = paper1_heads, strong_threshold
    rows = []
    for m in models:
        s = _model_sel(heads, m)
        layer = _a(heads, "layer", s, np.int64)
        P, R, RH, I, Ic = (_a(heads, k, s) for k in ("P", "R_scramble", "R_haar", "I_factorial", "I_factorial_ctrl"))
        strong = np.isfinite(P) & (P >= threshold)
        for L in np.unique(layer):
            sl = layer == L
            st = _scramble_stats(P[sl], R[sl], RH[sl], strong[sl])
            fi, fc = _mean(I[sl]), _mean(Ic[sl])
            rows.append({
                "model": m, "layer": int(L), "heads": int(sl.sum()), "strong": int(strong[sl].sum()),
                "beat_share": st["beat"] / st["n"] if st["n"] else NAN, "diff": st["diff"],
                "beat_ex_share": st["beat_ex"] / st["n_ex"] if st["n_ex"] else NAN, "diff_ex": st["diff_ex"],
                "beat_h_share": st["beat_h"] / st["n_h"] if st["n_h"] else NAN, "diff_h": st["diff_h"],
                "I": fi, "I_ctrl": fc, "I_diff": fi - fc,
            })
    return Table(
        name="p1_orientation_layers",
        caption="Per layer: share of heads whose trained closure beats their scramble (and Haar) median, median "
                "paired differences, and the factorial D×K endpoint with its wrong-V control.",
        columns=[
            _C("model", "Model"), _C("layer", "Layer"), _C("heads", "Heads"), _C("strong", "Strong"),
            _C("beat_share", "Share P > R", "{:.3f}"), _C("diff", "Median P−R", "{:.3g}"),
            _C("beat_ex_share", "Share P > R (non-strong)", "{:.3f}"), _C("diff_ex", "Median P−R (non-strong)", "{:.3g}"),
            _C("beat_h_share", "Share P > R_Haar", "{:.3f}"), _C("diff_h", "Median P−R_Haar", "{:.3g}"),
            _C("I", "Factorial I", "{:.4f}"), _C("I_ctrl", "Control I", "{:.4f}"), _C("I_diff", "Real − control", "{:.4f}"),
        ],
        rows=rows,
    )


@table("p1_factorial", families=(HEADS,))
def p1_factorial(paper1_heads: dict, models: list[str]) -> Table:
    """**Paper 1, factorial D×K.** Layer mean of the head interaction I_h over exhaustive donor reassignment,
    and real minus the wrong-V control."""
    heads = paper1_heads
    rows = []
    for m in models:
        s = _model_sel(heads, m)
        layer = _a(heads, "layer", s, np.int64)
        I, Ic = _a(heads, "I_factorial", s), _a(heads, "I_factorial_ctrl", s)
        ends, ctrl = [], []
        for L in np.unique(layer):
            sl = layer == L
            ends.append(_mean(I[sl]))
            ctrl.append(_mean(Ic[sl]))
        ends, ctrl = np.array(ends, dtype=float), np.array(ctrl, dtype=float)
        ok, okc = np.isfinite(ends), np.isfinite(ends) & np.isfinite(ctrl)
        rows.append({
            "model": m, "layers": int(ok.sum()), "mean_I": _mean(ends), "median_I": _med(ends),
            "pos": _frac(int(np.sum(ends[ok] > 0)), int(ok.sum())),
            "pos_pct": 100.0 * np.mean(ends[ok] > 0) if ok.any() else NAN,
            "mean_ctrl": _mean(ctrl), "diff": _mean((ends - ctrl)[okc]) if okc.any() else NAN,
            "pos_diff": _frac(int(np.sum((ends - ctrl)[okc] > 0)), int(okc.sum())),
            "pos_diff_pct": 100.0 * np.mean((ends - ctrl)[okc] > 0) if okc.any() else NAN,
        })
    return Table(
        name="p1_factorial",
        caption="Factorial D×K: layer mean of the head interaction I_h over exhaustive donor reassignment, and "
                "real minus the wrong-V control (K, D recomputed after wrong-V pairing).",
        columns=[
            _C("model", "Model"), _C("layers", "Layers"), _C("mean_I", "Mean endpoint", "{:.4f}"),
            _C("median_I", "Median endpoint", "{:.4f}"), _C("pos", "Layers I > 0"), _C("pos_pct", "%", "{:.1f}"),
            _C("mean_ctrl", "Mean control", "{:.4f}"), _C("diff", "Mean real − control", "{:.4f}"),
            _C("pos_diff", "Layers real − control > 0"), _C("pos_diff_pct", "% ", "{:.1f}"),
        ],
        rows=rows,
        notes="I_h = S[h,h] − mean_{j≠h} S[h,j] − mean_{i≠h} S[i,h] + mean_{i,j≠h} S[i,j], S[i,j] = P_{D_j}(K_i). "
              "GQA donors: the same query slot in the other KV groups; MHA: all heads. One KV group: undefined (–).",
    )


# ------------------------------------------------------------------ rank audit


def rank_tolerance(kind: str, d_model: int, d_head: int, rank_rtol: float) -> float:
    """Relative tolerance on s/s_max: rank_rtol, or the paper's max(m, n) * eps_float64."""
    if kind == "eps":
        return max(d_model, d_head) * float(np.finfo(np.float64).eps)
    if kind == "rank_rtol":
        return float(rank_rtol)
    raise ValueError(f"rank tolerance must be 'rank_rtol' or 'eps', not {kind!r}")


@table("p1_orientation_rank_audit", families=(HEADS,),
       params={"tolerance": "paper1/rank_tolerance", "rank_rtol": "rank_rtol", "pools": "paper1/pools"})
def p1_orientation_rank_audit(paper1_heads: dict, fields: dict, models: list[str], tolerance: str = "rank_rtol",
                              rank_rtol: float = 1e-6, pools: dict | None = None) -> Table:
    """**Paper 1, rank audit.** Every participating O/V factor (each head's O and its paired V): how many have
    full numerical column rank at the tolerance ``paper1.rank_tolerance`` = {{
    snakemake.params.tolerance }} (rank_rtol: s_min/s_max > ``rank_rtol``; eps: > max(m, n)·ε₆₄), and
    the smallest observed s_min/s_max (paper: 2.63e-4)."""
    # All-head rank audit of the participating O/V factors (each head's O_h and the V it is paired
    # with): full numerical column rank when s_min/s_max > tolerance, and the smallest s_min/s_max.
    heads = paper1_heads
    rows = []
    for m in models:
        s = _model_sel(heads, m)
        if not s.any():
            continue
        f = fields[m]
        tol = rank_tolerance(tolerance, f["d_model"], f["d_head"], rank_rtol)
        rO, rV = _a(heads, "sv_ratio_O", s), _a(heads, "sv_ratio_V", s)
        r = np.concatenate([rO, rV])
        fin = np.isfinite(r)
        full = int(np.sum(fin & (r > tol)))
        rows.append({"model": m, "heads": int(s.sum()), "factors": int(r.size), "full": _frac(full, int(r.size)),
                     "n_full": full, "tol": tol, "min_O": _min(rO), "min_V": _min(rV), "min_ratio": _min(r)})
    per_model = {r["model"]: r for r in rows}
    for label, members in _pools(list(per_model), pools):
        part = [per_model[m] for m in members]
        n = sum(x["factors"] for x in part)
        rows.append({"model": label, "heads": sum(x["heads"] for x in part), "factors": n,
                     "full": _frac(sum(x["n_full"] for x in part), n), "tol": None,
                     **{k: _min(np.array([x[k] for x in part])) for k in ("min_O", "min_V", "min_ratio")},
                     POOLED_MODELS: _pooled_models(members)})
    for r in rows:
        r.pop("n_full", None)
    label = "max(m, n)·ε₆₄" if tolerance == "eps" else f"rank_rtol = {rank_rtol:g}"
    return Table(
        name="p1_orientation_rank_audit",
        caption=f"Rank audit of the participating O/V factors: full numerical column rank at s_min/s_max > {label}, "
                "and the smallest observed s_min/s_max.",
        columns=[
            _C("model", "Model"), _C("heads", "Heads"), _C("factors", "O/V factors"),
            _C("full", "Full column rank"), _C("tol", "Tolerance (relative)", "{:.2e}"),
            _C("min_O", "Min s_min/s_max (O)", "{:.3e}"), _C("min_V", "Min s_min/s_max (V)", "{:.3e}"),
            _C("min_ratio", "Min s_min/s_max", "{:.3e}"), _C(POOLED_MODELS, "Pooled models"),
        ],
        rows=rows,
        notes="Factors: every head's O_h and the value factor it is paired with (one per head, so shared GQA "
              "values count once per head). Singular values from the SVD of each factor in float64. Tolerance: "
              "paper1.rank_tolerance (rank_rtol: the pipeline's rank; eps: max(d_model, d_head)·ε₆₄, the paper's).",
    )


# ------------------------------------------------------------------ capacity


def _gap_intervals(cap: dict, s, m: str, n_boot: int) -> tuple:
    """Layer-clustered percentile intervals (complete layers resampled within the model;
    core.stats.cluster_bootstrap) of the closure gap and the capacity gap, each the strong median
    minus the matched median: (closure lo, hi, capacity lo, hi)."""
    if not n_boot or not s.any():
        return (NAN,) * 4
    P, cp = _a(cap, "P", s), _a(cap, "cap", s)
    st, mt = _a(cap, "is_strong", s, bool), _a(cap, "is_matched", s, bool)

    def stat(ix):
        a, b = st[ix], mt[ix]
        return [_med(P[ix][a]) - _med(P[ix][b]), _med(cp[ix][a]) - _med(cp[ix][b])]

    lo, hi = cluster_bootstrap(stat, _clusters(cap, s), n_boot, rng_for(m, -1, -1, 0, BOOTSTRAP + "-capacity"))
    return lo[0], hi[0], lo[1], hi[1]


@table("p1_capacity", families=(CAP,), params=ST | {"bootstrap": "paper1/bootstrap"})
def p1_capacity(paper1_capacity: dict, models: list[str], strong_threshold: float, bootstrap: int = 0) -> Table:
    """**Paper 1, feasible capacity.** Cap_hat and attainment E of strong, layer-matched ordinary and
    hash-sampled heads (t = {{ snakemake.params.strong_threshold }}), and beside them the capacity from
    the random starts only and E from it; layer-clustered bootstrap 95% intervals of the closure and
    capacity gaps ({{ snakemake.params.bootstrap }} replicates, ``paper1.bootstrap``)."""
    cap, threshold, n_boot = paper1_capacity, strong_threshold, int(bootstrap or 0)
    rows = []
    for m in models:
        s = _model_sel(cap, m)
        P, R, cp, E = (_a(cap, k, s) for k in ("P", "R", "cap", "E"))
        # from the random starts only (absent in shards written before these columns: NaN)
        cr, Er = ((_a(cap, k, s) if k in cap else np.full(P.shape, NAN)) for k in ("cap_random", "E_random"))
        st, mt, sm = (_a(cap, k, s, bool) for k in ("is_strong", "is_matched", "is_sample"))
        layer = _a(cap, "layer", s, np.int64)
        lay_hi, n_lay, no_strong = 0, 0, 0
        for L in np.unique(layer):
            sl = (layer == L) & sm
            if np.isfinite(cp[sl]).any():
                n_lay += 1
                lay_hi += int(_med(cp[sl]) > 0.8)
            no_strong += int(not np.any(st[layer == L]))
        hi = sm & np.isfinite(cp) & (cp >= 0.9)
        closure_gap = _med(P[st]) - _med(P[mt])
        cap_gap = _med(cp[st]) - _med(cp[mt])
        p_lo, p_hi, c_lo, c_hi = _gap_intervals(cap, s, m, n_boot)
        rows.append({
            "model": m, "n_strong": int(st.sum()), "cap_strong": _med(cp[st]), "E_strong": _med(E[st]),
            "n_matched": int(mt.sum()), "cap_matched": _med(cp[mt]), "E_matched": _med(E[mt]),
            "closure_gap": closure_gap, "cap_gap": cap_gap,
            "gap_ratio": cap_gap / closure_gap if np.isfinite(closure_gap) and closure_gap != 0 else NAN,
            "n_sample": int(sm.sum()), "cap_sample": _med(cp[sm]), "layers_hi": _frac(lay_hi, n_lay),
            "layers_no_strong": no_strong, "sample_hi": int(hi.sum()),
            "sample_hi_below": _frac(int(np.sum(hi & (P < threshold))), int(hi.sum())),
            "cap_random_strong": _med(cr[st]), "E_random_strong": _med(Er[st]),
            "cap_random_matched": _med(cr[mt]), "E_random_matched": _med(Er[mt]),
            "cap_random_sample": _med(cr[sm]),
            "closure_gap_lo": p_lo, "closure_gap_hi": p_hi, "cap_gap_lo": c_lo, "cap_gap_hi": c_hi,
        })
    return Table(
        name="paper1_capacity",
        caption="Feasible capacity Cap_hat (projected ascent over orientations, spectrum and support fixed) and "
                "attainment E = (P - R)/(Cap_hat - R) for strong, layer-matched ordinary and hash-sampled heads.",
        columns=[
            _C("model", "Model"), _C("n_strong", "Strong"), _C("cap_strong", "Cap strong", "{:.3f}"),
            _C("E_strong", "E strong", "{:.3f}"), _C("n_matched", "Matched"),
            _C("cap_matched", "Cap matched", "{:.3f}"), _C("E_matched", "E matched", "{:.3f}"),
            _C("closure_gap", "Closure gap", "{:.3f}"), _C("cap_gap", "Capacity gap", "{:.3f}"),
            _C("gap_ratio", "Capacity/closure gap", "{:.3f}"), _C("n_sample", "Sample"),
            _C("cap_sample", "Cap sample", "{:.3f}"), _C("layers_hi", "Layers sample Cap > 0.8"),
            _C("layers_no_strong", "Layers without strong"), _C("sample_hi", "Sample Cap ≥ 0.9"),
            _C("sample_hi_below", "of which P < t"),
            _C("cap_random_strong", "Cap strong, random starts", "{:.3f}"),
            _C("E_random_strong", "E strong, random starts", "{:.3f}"),
            _C("cap_random_matched", "Cap matched, random starts", "{:.3f}"),
            _C("E_random_matched", "E matched, random starts", "{:.3f}"),
            _C("cap_random_sample", "Cap sample, random starts", "{:.3f}"),
            _C("closure_gap_lo", "Closure gap 95% lo", "{:.3f}"), _C("closure_gap_hi", "hi", "{:.3f}"),
            _C("cap_gap_lo", "Capacity gap 95% lo", "{:.3f}"), _C("cap_gap_hi", "hi", "{:.3f}"),
        ],
        rows=rows,
        notes="Medians over heads; gaps are strong minus matched medians. Cap_hat is a constructive lower bound "
              "(trained K + random restarts, config paper1.capacity); E is not clipped. Since Cap_hat includes the "
              "trained K's start, E ≤ 1 by construction; the 'random starts' columns use only the Haar-random "
              "restarts (Cap from them alone, E = (P - R)/(Cap_random - R)), so E > 1 there means the trained "
              "orientation beats every random-start ascent. They need restarts ≥ 2 (else –). Gap 95% intervals: "
              "percentile bootstrap resampling complete layers of the model (paper1.bootstrap replicates; – with 0).",
    )


def _traj_units(cs, layer, eligible, key, st, mt):
    return [(cs[key][(layer == L) & st & np.isfinite(cs[key])], cs[key][(layer == L) & mt & np.isfinite(cs[key])])
            for L in eligible]


def _layer_gap(units):
    g = [a.mean() - b.mean() for a, b in units if a.size and b.size]
    return float(np.mean(g)) if g else NAN, g


def _covers_zero(lo, hi):
    """Whether a 95% interval holds 0; None (an empty cell) when it was not computed."""
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    return bool(lo <= 0 <= hi)


@table("p1_table3_trajectories", families=(CAP,), params=ST | {"bootstrap": "paper1/bootstrap", "lineages": "paper1/lineages"},
       shard_models="lineages")
def p1_table3_trajectories(paper1_capacity: dict, lineages: dict[str, list[str]] | None, strong_threshold: float,
                           bootstrap: int, models: list[str] = ()) -> Table:
    """**Paper 1, Table 3.** Trajectories: closure P, scramble median R, feasible capacity Cap_hat and
    attainment E per checkpoint of each lineage (groups fixed at the final checkpoint; t = {{
    snakemake.params.strong_threshold }}), with the attainment gap and its hierarchical-bootstrap
    interval ({{ snakemake.params.bootstrap }} replicates), and the same intervals for the closure and
    capacity gaps."""
    # no lineages configured: every model is a lineage of one checkpoint
    cap, threshold, n_boot, default_lineages = paper1_capacity, strong_threshold, int(bootstrap), not lineages
    lineages = lineages or {m: [m] for m in models}
    rows = []
    finals, finals_pc = {}, {}
    for name, members in lineages.items():
        final = members[-1]
        sf = _model_sel(cap, final)
        lay_f = _a(cap, "layer", sf, np.int64)
        st_f, mt_f = _a(cap, "is_strong", sf, bool), _a(cap, "is_matched", sf, bool)
        eligible = [int(L) for L in np.unique(lay_f) if st_f[lay_f == L].any() and mt_f[lay_f == L].any()]
        for pos, m in enumerate(members):
            s = _model_sel(cap, m)
            cs = {k: _a(cap, k, s) for k in ("P", "R", "cap", "E")}
            layer = _a(cap, "layer", s, np.int64)
            st, mt = _a(cap, "is_strong", s, bool), _a(cap, "is_matched", s, bool)
            el = np.isin(layer, eligible)
            ue = _traj_units(cs, layer, eligible, "E", st, mt)
            e_gap, per_layer = _layer_gap(ue)
            p_gap, _ = _layer_gap(_traj_units(cs, layer, eligible, "P", st, mt))
            c_gap, _ = _layer_gap(_traj_units(cs, layer, eligible, "cap", st, mt))
            _, lo, hi = hierarchical_bootstrap([ue], n_boot, rng_for(name, m, -1, 0, BOOTSTRAP))
            up = _traj_units(cs, layer, eligible, "P", st, mt)
            uc = _traj_units(cs, layer, eligible, "cap", st, mt)
            _, p_lo, p_hi = hierarchical_bootstrap([up], n_boot, rng_for(name, m, -1, 0, BOOTSTRAP + "-closure"))
            _, c_lo, c_hi = hierarchical_bootstrap([uc], n_boot, rng_for(name, m, -1, 0, BOOTSTRAP + "-capacity"))
            if pos == len(members) - 1:
                finals[name] = ue
                finals_pc[name] = (up, uc)
            if pos == 0:
                first = (e_gap, c_gap)
            rows.append({
                "lineage": name, "checkpoint": m, "step": pos, "layers": len(eligible),
                "n_strong": int((st & el).sum()), "n_matched": int((mt & el).sum()),
                "P_s": _med(cs["P"][st & el]), "P_o": _med(cs["P"][mt & el]),
                "R_s": _med(cs["R"][st & el]), "R_o": _med(cs["R"][mt & el]),
                "cap_s": _med(cs["cap"][st & el]), "cap_o": _med(cs["cap"][mt & el]),
                "E_s": _med(cs["E"][st & el]), "E_o": _med(cs["E"][mt & el]),
                "p_gap": p_gap, "c_gap": c_gap, "e_gap": e_gap, "e_lo": lo, "e_hi": hi,
                "p_lo": p_lo, "p_hi": p_hi, "c_lo": c_lo, "c_hi": c_hi,
                "e_pos": _frac(int(np.sum(np.array(per_layer) > 0)), len(per_layer)),
                "c_over_p": c_gap / p_gap if p_gap else NAN,
                "growth_diff": (e_gap - first[0]) - (c_gap - first[1]),
                "e_ci_zero": _covers_zero(lo, hi), "c_ci_zero": _covers_zero(c_lo, c_hi),
            })
    if len(finals) > 1:
        point, lo, hi = hierarchical_bootstrap(list(finals.values()), n_boot, rng_for("all-lineages", "final", -1, 0, BOOTSTRAP))
        per_layer = [a.mean() - b.mean() for u in finals.values() for a, b in u if a.size and b.size]
        _, p_lo, p_hi = hierarchical_bootstrap([u for u, _ in finals_pc.values()], n_boot,
                                                rng_for("all-lineages", "final", -1, 0, BOOTSTRAP + "-closure"))
        _, c_lo, c_hi = hierarchical_bootstrap([u for _, u in finals_pc.values()], n_boot,
                                                rng_for("all-lineages", "final", -1, 0, BOOTSTRAP + "-capacity"))
        rows.append({"lineage": "all (final)", "checkpoint": "–", "step": None, "layers": len(per_layer),
                     "p_lo": p_lo, "p_hi": p_hi, "c_lo": c_lo, "c_hi": c_hi,
                     "e_gap": point, "e_lo": lo, "e_hi": hi,
                     "e_pos": _frac(int(np.sum(np.array(per_layer) > 0)), len(per_layer))})
    note = ("Groups (strong P ≥ t, layer-matched ordinary) are fixed at the final checkpoint of each lineage; eligible "
            "layers hold both. Gaps: mean over eligible layers of (strong mean − ordinary mean); growth: the gap at this "
            "checkpoint minus the gap at the lineage's first; covers 0: the 95% interval holds 0 (empty without "
            "bootstrap replicates); E-gap 95% interval: "
            "hierarchical bootstrap over layers then heads (and lineages for the pooled row); the closure- and "
            "capacity-gap intervals the same, from their own replicates.")
    if default_lineages:
        note += " No paper1.lineages configured: each active model is shown as a one-checkpoint lineage (its endpoint)."
    return Table(
        name="p1_table3_trajectories",
        caption=f"Trajectories: closure P, scramble median R, feasible capacity Cap_hat and attainment E per checkpoint (t = {threshold:g}).",
        columns=[
            _C("lineage", "Lineage"), _C("checkpoint", "Checkpoint"), _C("step", "#"), _C("layers", "Layers"),
            _C("n_strong", "Strong"), _C("n_matched", "Ordinary"),
            _C("P_s", "P strong", "{:.3f}"), _C("P_o", "P ord.", "{:.3f}"),
            _C("R_s", "R strong", "{:.2e}"), _C("R_o", "R ord.", "{:.2e}"),
            _C("cap_s", "Cap strong", "{:.3f}"), _C("cap_o", "Cap ord.", "{:.3f}"),
            _C("E_s", "E strong", "{:.3f}"), _C("E_o", "E ord.", "{:.3f}"),
            _C("p_gap", "Closure gap", "{:.3f}"), _C("c_gap", "Capacity gap", "{:.3f}"),
            _C("e_gap", "Attainment gap", "{:.3f}"), _C("e_lo", "95% lo", "{:.3f}"), _C("e_hi", "95% hi", "{:.3f}"),
            _C("e_pos", "Layers E-gap > 0"),
            _C("p_lo", "Closure gap 95% lo", "{:.3f}"), _C("p_hi", "hi", "{:.3f}"),
            _C("c_lo", "Capacity gap 95% lo", "{:.3f}"), _C("c_hi", "hi", "{:.3f}"),
            _C("c_over_p", "Capacity gap / closure gap", "{:.3f}"),
            _C("growth_diff", "E-gap growth − capacity-gap growth", "{:.3f}"),
            _C("e_ci_zero", "E-gap 95% covers 0"), _C("c_ci_zero", "Capacity gap 95% covers 0"),
        ],
        rows=rows,
        notes=note,
    )


# ------------------------------------------------------------------ siblings and anchors


@table("p1_table4_sibling_law", families=(PAIRS,), params=ST)
def p1_table4_sibling_law(paper1_pairs: dict, paper1_heads: dict | None = None, models: list[str] = (),
                          strong_threshold: float = 0.9) -> Table:
    """**Paper 1, Table 4.** Shared-value sibling law: right heads j with P(T_j) ≥ {{
    snakemake.params.strong_threshold }} and every sibling i in their KV group; median fixed-gain
    explanation F_ij and gain ratio ρ_ij against the next-group control."""
    pairs, threshold = paper1_pairs, strong_threshold  # paper1_heads: not read (the pairs carry what it needs)
    rows = []
    for m in models:
        s = _model_sel(pairs, m)
        if not s.any():
            continue
        Pj, F, rho, Fc, rc = (_a(pairs, k, s) for k in ("P_j", "F", "rho", "F_ctrl", "rho_ctrl"))
        layer = _a(pairs, "layer", s, np.int64)
        hj = _a(pairs, "head_j", s, np.int64)
        right = np.isfinite(Pj) & (Pj >= threshold) & np.isfinite(F)
        n_right = len({(int(L), int(h)) for L, h in zip(layer[right], hj[right])})
        inf, fav = 0, 0
        for L in np.unique(layer[right]):
            sl = right & (layer == L)
            if np.isfinite(Fc[sl]).any():
                inf += 1
                fav += int(_med(F[sl]) > _med(Fc[sl]))
        rows.append({
            "model": m, "right": n_right, "comp": int(right.sum()),
            "F": _med(F[right]), "rho": _med(rho[right]), "F_ctrl": _med(Fc[right]), "rho_ctrl": _med(rc[right]),
            "layers_fav": _frac(fav, inf), "F_all": _med(F), "bound_checked": int(np.isfinite(_a(pairs, "gamma", s)).sum()),
        })
    return Table(
        name="p1_table4_sibling_law",
        caption=f"Shared-value sibling law: right heads j with P(T_j) ≥ {threshold:g} and every other head i of their KV "
                "group; fixed-gain explanation F_ij and gain ratio ρ_ij against the next-group control.",
        columns=[
            _C("model", "Model"), _C("right", "Right heads"), _C("comp", "Compositions"),
            _C("F", "Median F_ij", "{:.3f}"), _C("rho", "Median ρ_ij", "{:.3f}"),
            _C("F_ctrl", "Control F", "{:.3f}"), _C("rho_ctrl", "Control ρ", "{:.3f}"),
            _C("layers_fav", "Layers favoring law"), _C("F_all", "Median F (all pairs)", "{:.3f}"),
            _C("bound_checked", "γ-bound checks passed"),
        ],
        rows=rows,
        notes="F_ij = 1 − ||T_iT_j − α_j T_i||²/||T_iT_j||² with α_j fitted on j alone; ρ_ij = β_ij/α_j. Control: the "
              "same query slot in the next KV group (– with one KV group). Models without shared values (MHA) have no row. "
              "||T_iT_j − aT_i||² ≤ γ_ij ||T_j² − aT_j||² is asserted for every pair at a ∈ {α_j, β_ij, 0}.",
    )


BAND_MEMBERSHIP = ("explanation", "strong")


def band_pairs(pairs: dict, sel, threshold: float, explanation: float, membership: str = "explanation") -> np.ndarray:
    """Left-zero band: directed rows (i, j) of the selection in the band. Both rows of a band pair
    are marked. ``membership`` (config paper1.band.membership):
      explanation  the paper's criterion: both heads strong (P ≥ t) and the unordered pair satisfies
                   P_iP_j ≈ P_i and P_jP_i ≈ P_j, i.e. F_ij ≥ explanation and F_ji ≥ explanation
                   (F_ij = 1 − ||P_iP_j − P_i||²/||P_iP_j||² with P_h = T_h/α_h, the fixed-scale
                   product explanation);
      strong       both heads strong and F defined both ways (the earlier reading; ``explanation``
                   unused)."""
    if membership not in BAND_MEMBERSHIP:
        raise ConfigError(f"config: paper1.band.membership: {membership!r} is not one of {', '.join(BAND_MEMBERSHIP)}")
    idx = np.flatnonzero(sel)
    mod = np.asarray(pairs["model"])[idx]
    lay = _a(pairs, "layer", None, np.int64)[idx]
    hi, hj = _a(pairs, "head_i", None, np.int64)[idx], _a(pairs, "head_j", None, np.int64)[idx]
    Pi, Pj, F = (_a(pairs, k, None)[idx] for k in ("P_i", "P_j", "F"))
    lookup = {(a, b, c, d): f for a, b, c, d, f in zip(mod.tolist(), lay.tolist(), hi.tolist(), hj.tolist(), F.tolist())}
    rev = np.array([lookup.get((a, b, d, c), np.nan) for a, b, c, d in zip(mod.tolist(), lay.tolist(), hi.tolist(), hj.tolist())])
    strong = np.isfinite(Pi) & np.isfinite(Pj) & (Pi >= threshold) & (Pj >= threshold) & np.isfinite(F) & np.isfinite(rev)
    if membership == "strong":
        return strong
    with np.errstate(invalid="ignore"):
        return strong & (F >= explanation) & (rev >= explanation)


@table("p1_anchors", families=(HEADS, PAIRS), params=ST | {"band": "paper1/band", "pools": "paper1/pools"})
def p1_anchors(paper1_pairs: dict, paper1_heads: dict, models: list[str], strong_threshold: float,
               band: dict | None = None, pools: dict | None = None) -> Table:
    """**Paper 1, value anchors.** Value anchors P_V, oblique share, same-layer retrieval rank of the trained
    V, and the left-zero band of strong sibling pairs: all strong pairs, and the band pairs by
    ``paper1.band.membership`` = {{ snakemake.params.band.membership }} (explanation: P_iP_j ≈ P_i both
    ways, F_ij, F_ji ≥ {{ snakemake.params.band.explanation }}; strong: every strong pair); ranges over
    models with at least {{ snakemake.params.band.min_pairs }} such pairs."""
    # paper1.band: explanation (τ), min_pairs, membership
    pairs, heads, threshold, band = paper1_pairs, paper1_heads, strong_threshold, band or {}
    explanation, min_pairs = band.get("explanation", 0.9), band.get("min_pairs", 10)
    membership = band.get("membership", "explanation")
    rows = []
    for m in models:
        s = _model_sel(heads, m)
        P, an, anw, ob = (_a(heads, k, s) for k in ("P", "anchor_cos2", "anchor_cos2_wrong_v", "oblique_share"))
        rank = _a(heads, "retrieval_rank", s, np.int64)
        ncand = _a(heads, "n_value_candidates", s, np.int64)
        strong = np.isfinite(P) & (P >= threshold) & np.isfinite(an)
        n_s = int(strong.sum())
        sw = strong & np.isfinite(anw)
        sp = _model_sel(pairs, m)
        Pi, Pj, F, cos2 = (_a(pairs, k, sp) for k in ("P_i", "P_j", "F", "cos2"))
        both = np.isfinite(Pi) & np.isfinite(Pj) & (Pi >= threshold) & (Pj >= threshold) & np.isfinite(F)
        rows.append({
            "model": m, "strong": n_s, "anchor": _med(an[strong]), "oblique": _med(ob[strong]),
            "fav": _frac(int(np.sum(an[sw] > anw[sw])), int(sw.sum())),
            "rank1": _frac(int(np.sum(rank[strong] == 1)), n_s),
            "cands": int(np.max(ncand)) if ncand.size else None,
            "band_pairs": int(both.sum()) // 2, "band_cos2": _med(cos2[both]), "band_F": _med(F[both]),
            "band_lt08": _share(cos2[both] < 0.8) if both.any() else NAN,
        })
        law = band_pairs(pairs, sp, threshold, explanation, membership) if sp.any() else np.zeros(0, dtype=bool)
        n_law = int(law.sum()) // 2
        rows[-1].update(law_pairs=n_law, law_products=int(law.sum()), law_cos2=_med(cos2[law]), law_F=_med(F[law]),
                        law_lt08=_share(cos2[law] < 0.8) if law.any() else NAN,
                        law_counted="yes" if n_law >= min_pairs else "no")
    per_model = {r["model"]: r for r in rows}
    for label, members in _pools(models, pools):
        part = [per_model[m] for m in members]
        counted = [r for r in part if r["law_pairs"] >= min_pairs]

        def rng_of(key, counted=counted):
            v = [r[key] for r in counted if np.isfinite(r[key])]
            return f"{min(v):.3f} – {max(v):.3f}" if v else "–"

        rows.append({"model": label, "strong": sum(r["strong"] for r in part),
                     "law_pairs": sum(r["law_pairs"] for r in part), "law_products": sum(r["law_products"] for r in part),
                     "law_counted": f"{len(counted)} models", "law_cos2_range": rng_of("law_cos2"),
                     "law_F_range": rng_of("law_F"),
                     "law_lt08_min": 100 * min((r["law_lt08"] for r in counted if np.isfinite(r["law_lt08"])), default=NAN),
                     POOLED_MODELS: _pooled_models(members)})
    return Table(
        name="p1_anchors",
        caption=f"Value anchors of strong heads (P ≥ {threshold:g}): squared cosine of T_h/α_h with the projector onto "
                "span V, oblique share, anchor vs wrong-V, same-layer retrieval rank; left-zero band of strong sibling pairs.",
        columns=[
            _C("model", "Model"), _C("strong", "Strong"), _C("anchor", "Median anchor cos²", "{:.3f}"),
            _C("oblique", "Median oblique share", "{:.3f}"), _C("fav", "Anchor > wrong-V"),
            _C("rank1", "Trained V ranked 1"), _C("cands", "Candidates"),
            _C("band_pairs", "Strong sibling pairs"), _C("band_cos2", "Median cos² (pairs)", "{:.3f}"),
            _C("band_F", "Median P_iP_j ≈ P_i explanation", "{:.3f}"), _C("band_lt08", "Share cos² < 0.8", "{:.3f}"),
            _C("law_pairs", "Band pairs (both ways)"), _C("law_products", "Directed products"),
            _C("law_cos2", "Band median cos²", "{:.3f}"), _C("law_F", "Band median explanation", "{:.3f}"),
            _C("law_lt08", "Band share cos² < 0.8", "{:.3f}"), _C("law_counted", f"≥ {min_pairs} band pairs"),
            _C("law_cos2_range", "Band median cos² (range)"), _C("law_F_range", "Band median explanation (range)"),
            _C("law_lt08_min", "Band % cos² < 0.8 (smallest)", "{:.1f}"), _C(POOLED_MODELS, "Pooled models"),
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


# ------------------------------------------------------------------ figures



@figure("p1_fig_closure_ccdf", families=(HEADS,), params=ST | {"sweep": "paper1/sweep"})
def p1_fig_closure_ccdf(paper1_heads: dict, models: list[str], strong_threshold: float, sweep):
    """**Paper 1, closure CCDF.** Closure CCDF per model with the wrong-V control and the threshold sweep (t =
    {{ snakemake.params.strong_threshold }})."""
    heads, threshold = paper1_heads, strong_threshold
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ts = _sweep_values(sweep)
    for i, m in enumerate(models):
        s = _model_sel(heads, m)
        c = f"C{i}"
        P, Pw = _a(heads, "P", s), _a(heads, "P_wrong_v", s)
        step_ccdf(ax, P, color=c, label=f"{m} (trained)")
        step_ccdf(ax, Pw, color=c, ls="--", alpha=0.8, label=f"{m} (wrong-V)")
        n = max(int(np.isfinite(P).sum()), 1)
        ax2.plot(ts, [100 * np.sum(P >= t) / n for t in ts], "o-", color=c, ms=3, label=f"{m} (trained)")
        if np.isfinite(Pw).any():
            ax2.plot(ts, [100 * np.sum(Pw >= t) / n for t in ts], "x--", color=c, ms=3, label=f"{m} (wrong-V)")
    ax.axvline(threshold, color="k", lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="closure P", ylabel="fraction of heads with P ≥ x",
           title="Closure CCDF, trained vs wrong-V")
    ax2.axvline(threshold, color="k", lw=0.8, ls=":")
    ax2.set(xlabel="threshold t", ylabel="% of heads with P ≥ t", title="Threshold sweep")
    ax.legend(fontsize=6)
    ax2.legend(fontsize=6)
    fig.tight_layout()
    return fig


@figure("p1_fig_orientation_scramble", families=(HEADS,), params=ST)
def p1_fig_orientation_scramble(paper1_heads: dict, models: list[str], strong_threshold: float):
    """**Paper 1, orientation scramble.** Trained closure against the median of each head's orientation
    scrambles (t = {{ snakemake.params.strong_threshold }})."""
    heads, threshold = paper1_heads, strong_threshold
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    lo = 1.0
    for i, m in enumerate(models):
        s = _model_sel(heads, m)
        P, R = _a(heads, "P", s), _a(heads, "R_scramble", s)
        ok = np.isfinite(P) & np.isfinite(R) & (P > 0) & (R > 0)
        if ok.any():
            lo = min(lo, P[ok].min(), R[ok].min())
        ax.scatter(R[ok], P[ok], s=6, color=f"C{i}", alpha=0.6, label=m)
    lo = max(lo / 2, 1e-12)
    ax.plot([lo, 1], [lo, 1], "k-", lw=0.7)
    ax.axhline(threshold, color="k", ls=":", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="scrambled closure (median of signed-permutation draws)",
           ylabel="trained closure P", title="Trained vs scrambled closure per head")
    ax.legend(fontsize=7)
    return fig


@figure("p1_fig_capacity", families=(CAP,), params=ST)
def p1_fig_capacity(paper1_capacity: dict, models: list[str], strong_threshold: float):
    """**Paper 1, feasible capacity.** Feasible capacity against attained closure for strong, matched and
    sampled heads."""
    cap, threshold = paper1_capacity, strong_threshold
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    marks = (("is_sample", "sample", "o", 0.35), ("is_matched", "matched ordinary", "s", 0.6), ("is_strong", "strong", "^", 0.9))
    for i, m in enumerate(models):
        s = _model_sel(cap, m)
        P, cp = _a(cap, "P", s), _a(cap, "cap", s)
        for key, lab, mk, al in marks:
            g = _a(cap, key, s, bool) & np.isfinite(cp)
            if g.any():
                ax.scatter(cp[g], P[g], s=12, marker=mk, color=f"C{i}", alpha=al, label=f"{m} {lab}")
    ax.plot([0, 1], [0, 1], "k-", lw=0.7)
    ax.axhline(threshold, color="k", ls=":", lw=0.8)
    ax.set(xlabel="feasible capacity Cap_hat", ylabel="attained closure P", xlim=(0, 1.02), ylim=(0, 1.02),
           title="Capacity vs attained closure")
    ax.legend(fontsize=6)
    return fig


F_RANGE, RHO_RANGE = (-1.0, 1.05), (-0.5, 1.5)


@figure("p1_fig_sibling_law", families=(PAIRS,), params=ST)
def p1_fig_sibling_law(paper1_pairs: dict, models: list[str], strong_threshold: float):
    """**Paper 1, sibling law.** ECDFs of the fixed-gain explanation F_ij and the gain ratio ρ_ij against the
    next-group control (dashed)."""
    pairs, threshold = paper1_pairs, strong_threshold
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    any_right = False
    for i, m in enumerate(models):
        s = _model_sel(pairs, m)
        if not s.any():
            continue
        Pj = _a(pairs, "P_j", s)
        right = np.isfinite(Pj) & (Pj >= threshold)
        sel, tag = (right, "strong j") if right.any() else (np.ones_like(right), "all j")
        any_right |= bool(right.any())
        for a, key, ckey, (lo, hi) in ((ax, "F", "F_ctrl", F_RANGE), (ax2, "rho", "rho_ctrl", RHO_RANGE)):
            v, vc = np.clip(_a(pairs, key, s)[sel], lo, hi), np.clip(_a(pairs, ckey, s)[sel], lo, hi)
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


# ------------------------------------------------------------------ jobs


# ------------------------------------------------------------------ paper 1 natural return


def natural_return_rows(nat: dict, clo: dict, models, high_q: float = 0.9, low_q: float = 0.5) -> tuple[list, dict]:
    rows, pops = [], {}
    for m in models:
        sn, sc = nat["model"] == m, clo["model"] == m
        key = lambda c, s: {(int(l), int(h)): i for i, (l, h) in enumerate(zip(c["layer"][s], c["head"][s]))}
        kn = key(nat, sn)
        P = clo["P"][sc]
        layer = clo["layer"][sc].astype(int)
        head = clo["head"][sc].astype(int)
        hi, lo, elig = population(P, layer, high_q, low_q)
        idx = lambda sel: np.array([kn[(layer[i], head[i])] for i in sel], int)
        ih, il = idx(hi), idx(lo)
        A, Aw, g = nat["align"][sn], nat["align_wrong_v"][sn], nat["g_y"][sn]
        both = 0
        for l in elig:
            mh = layer[hi] == l
            a_h, a_w, a_l = A[ih[mh]], Aw[ih[mh]], A[il[mh]]
            if np.nanmean(a_h) - np.nanmean(a_l) > 0 and (np.all(np.isnan(a_w)) or np.nanmean(a_h) - np.nanmean(a_w) > 0):
                both += 1
        rows.append({
            "model": m, "pairs": len(hi), "heads": 2 * len(hi), "eligible_layers": len(elig),
            "align_high": finite_quantile(A[ih], 0.5), "align_wrong_v": finite_quantile(Aw[ih], 0.5), "align_low": finite_quantile(A[il], 0.5),
            "layers_both_positive": both, "g_y_high": finite_quantile(g[ih], 0.5), "g_y_low": finite_quantile(g[il], 0.5),
            "wrong_v_defined": bool(np.isfinite(Aw[ih]).any()) if len(ih) else False,
        })
        pops[m] = {"high": A[ih], "wrong_v": Aw[ih], "low": A[il]}
    return rows, pops


@table("p1_activations_natural_return", families=(NAT, HEADS), params={"endpoint": "activation/paper1/endpoint", "high_quantile": "activation/paper1/high_quantile",
                "low_quantile": "activation/paper1/low_quantile"},
       shard_models="activation", builder_models="activation",
       headlines=(("align_high", "natural return: median alignment, high-closure heads"),
                  ("align_low", "natural return: median alignment, low-closure heads"),
                  ("align_wrong_v", "natural return: median alignment, wrong V")))
def p1_activations_natural_return(activation_natural_return: dict, paper1_heads: dict, models, endpoint: str = "pooled",
                                  high_quantile: float = 0.9, low_quantile: float = 0.5) -> Table:
    """**Paper 1, natural return on real text (activation stage).** Per model: the high-closure heads (P at or
    above the {{ snakemake.params.high_quantile }} quantile) paired with layer-matched low-closure heads
    (P at or below the {{ snakemake.params.low_quantile }} quantile) in eligible layers; medians of the
    alignment of the natural post-O outputs y with their return T y (endpoint {{
    snakemake.params.endpoint }}) for high heads, their cyclic wrong-V control and the low heads; layers
    where both contrasts are positive; median RMS return magnitude g_y of high and low heads."""
    nat, clo = activation_natural_return, paper1_heads
    params = {"endpoint": endpoint, "high_quantile": high_quantile, "low_quantile": low_quantile}
    rows, _ = natural_return_rows(nat, clo, models, params.get("high_quantile", 0.9), params.get("low_quantile", 0.5))
    t = Table(
        "activation_natural_return",
        "Paper 1 natural return: high-closure decile vs layer-matched low-closure heads on real text "
        "(medians of the squared directional alignment of y with Ty; g_y = RMS return magnitude)",
        [Column("model", "Model"), Column("pairs", "Pairs"), Column("heads", "Heads"),
         Column("eligible_layers", "Eligible layers"),
         Column("align_high", "High", "{:.3f}"), Column("align_wrong_v", "Wrong-V", "{:.2e}"),
         Column("align_low", "Low", "{:.3f}"), Column("layers_both_positive", "Layers both > 0"),
         Column("g_y_high", "g_y high", "{:.3f}"), Column("g_y_low", "g_y low", "{:.3f}")],
        rows,
        notes=(f"Endpoint: {params.get('endpoint', 'pooled')}; high = top {1 - params.get('high_quantile', 0.9):.0%} of the "
               f"model's closure P, low pool = P <= its {params.get('low_quantile', 0.5):.0%} quantile, paired within "
               "eligible layers. Wrong-V is undefined (NaN) for MQA models (one KV group)."),
    )
    return t


@figure("p1_fig_activations_natural_return", families=(NAT, HEADS), params={"endpoint": "activation/paper1/endpoint", "high_quantile": "activation/paper1/high_quantile",
                "low_quantile": "activation/paper1/low_quantile"},
        shard_models="activation", builder_models="activation")
def p1_fig_activations_natural_return(activation_natural_return: dict, paper1_heads: dict, models,
                                      high_quantile: float = 0.9, low_quantile: float = 0.5):
    """**Paper 1, natural return on real text.** Per-head alignment of y with T y: high-closure heads (blue),
    their wrong-V control (red) and layer-matched low-closure heads (grey), medians marked."""
    nat, clo = activation_natural_return, paper1_heads
    params = {"high_quantile": high_quantile, "low_quantile": low_quantile}
    _, pops = natural_return_rows(nat, clo, models, params.get("high_quantile", 0.9), params.get("low_quantile", 0.5))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.9 * max(len(models), 2) + 1, 3.6))
    labels, data, pos, colors = [], [], [], []
    for i, m in enumerate(models):
        for k, (name, c) in enumerate((("high", "C0"), ("wrong_v", "C3"), ("low", "C7"))):
            x = np.asarray(pops[m][name], float)
            x = np.clip(x[np.isfinite(x)], 1e-8, 1)
            data.append(x if x.size else np.array([np.nan]))
            pos.append(i * 4 + k)
            colors.append(c)
        labels.append(m)
    for x, p, c in zip(data, pos, colors):
        ax.scatter(np.full(x.size, p) + np.linspace(-0.25, 0.25, x.size), x, s=8, color=c, alpha=0.7)
        if np.isfinite(x).any():
            ax.hlines(np.nanmedian(x), p - 0.35, p + 0.35, color="k", lw=1.5)
    ax.set_xticks([i * 4 + 1 for i in range(len(models))], labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("alignment of y with Ty")
    ax.set_title("Natural return: high (blue), wrong-V (red), layer-matched low (grey)")
    return fig
