"""The PK paper (reading and writing spaces of heads and their projection-kernel overlap): every
table and figure, each builder registered by the decorator above it (headgeom.outputs.registry;
its docstring is the caption), from the PK shards (``pk``, ``pk_cross``, ``pk_self``,
``pk_null_within``, ``pk_null_cross``) and the activation stage's ``activation_read_paths``:

  Tables 1-9       pk_table1_min_angles ... pk_table9_weighted (Table 5: pk_table5_writing)
  Figures 2-9      pk_fig2_rho_ccdf_nulls, pk_fig3_r, pk_fig4_share_vs_rho, pk_fig5_spearman_layer_pairs,
                   pk_fig6_depth, pk_fig7_quantiles, pk_fig8_reading_sd, pk_fig9_cross_heatmaps
  what the paper prints beside them: the conditions behind Figures 3 and 9, the null samples, per
  layer statistics, ranks, self-overlap (Appendix H), base vs instruct (Appendix E, §5.5), the
  read paths on real text (§5.4), one layer's ρ CCDF.

The null comparisons loop over the configured null types (``pk.nulls.types``): every null's
samples, or, where the paper compares with one kind of null, those of the configured types that are
of that kind (``NullModel.keeps_columns``: Table 6 and Figure 8; ``keeps_spectrum``: Table 8)."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict

import numpy as np

from headgeom.architectures import o_proj_names
from headgeom.core.seeds import rng_for
from headgeom.core.stats import empirical_p
from headgeom.methods.nulls import NULL_MODELS
from headgeom.methods.overlap import isotropic_rho, isotropic_sd, layer_stats
from headgeom.outputs.formats import Column, Table, finite_quantile, nanstat, pyplot, step_ccdf
from headgeom.outputs.registry import decorators

table, figure = decorators("PK paper")
NULLS = {"null_types": "pk/nulls/types"}
WITHIN, CROSS = ("pk", "pk_null_within"), ("pk_cross", "pk_null_cross")
ALL4 = ("pk", "pk_cross", "pk_null_within", "pk_null_cross")
RP = "activation_read_paths"
ACT = {"shard_models": "activation", "builder_models": "activation"}

COMPARISONS = [("within", "O"), ("within", "Q"), ("within", "K"), ("within", "V"),
               ("cross", "Q"), ("cross", "K"), ("cross", "V")]


def _label(scope, kind):
    return {"O": "writing, within layer"}.get(kind, f"{kind} reading, within layer") if scope == "within" \
        else f"writing -> {kind}, across layers"


def _rng(vals, fmt="{:.3f}"):
    v = np.asarray([x for x in vals if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return "–"
    return (fmt + " – " + fmt).format(v.min(), v.max())


# ------------------------------------------------------------------ observed and null statistics


def observed_within(pk: dict, fields: dict) -> dict:
    """(model, layer, kind) -> layer_stats of the within-layer pairs."""
    out = {}
    if not pk:
        return out
    groups = defaultdict(list)
    for i, key in enumerate(zip(pk["model"], pk["layer"], pk["kind"])):
        groups[(str(key[0]), int(key[1]), str(key[2]))].append(i)
    for (m, l, k), idx in groups.items():
        iso = isotropic_rho(fields[m]["d_head"], fields[m]["d_model"])
        out[(m, l, k)] = layer_stats(pk["rho"][idx], pk["min_angle_deg"][idx], iso) | {"rho": np.asarray(pk["rho"][idx], float)}
    return out


def observed_cross(cross: dict, fields: dict) -> dict:
    """(model, layer_w, layer_r, kind) -> layer_stats (+ max weighted, lower-bound facts)."""
    out = {}
    if not cross:
        return out
    groups = defaultdict(list)
    for i, key in enumerate(zip(cross["model"], cross["layer"], cross["layer_r"], cross["kind"])):
        groups[(str(key[0]), int(key[1]), int(key[2]), str(key[3]))].append(i)
    for (m, lw, lr, k), idx in groups.items():
        f = fields[m]
        iso = isotropic_rho(f["d_head"], f["d_model"])
        idx = np.asarray(idx)
        st = layer_stats(cross["rho"][idx], cross["min_angle_deg"][idx], iso)
        rho = np.asarray(cross["rho"][idx], float)
        heads_r = np.asarray(cross["head_r"][idx])
        # per reader: max over writers of rho(R, U_i)  (PK Table 2)
        max_per_reader = np.array([np.nanmax(rho[heads_r == h]) for h in np.unique(heads_r)])
        st.update(max_weighted=float(np.nanmax(cross["weighted"][idx])),
                  mean_weighted=float(np.nanmean(cross["weighted"][idx])),
                  lambda_min_S=float(cross["lambda_min_S"][idx][0]),
                  min_reader_max_rho=float(max_per_reader.min()),
                  n_writers=int(np.unique(cross["head_w"][idx]).size),
                  angles=np.asarray(cross["min_angle_deg"][idx], float))
        out[(m, lw, lr, k)] = st
    return out


def null_groups(nulls: dict, key_cols: tuple) -> dict:
    """(key..., null) -> dict of arrays over samples (mean, sd, min_angle_deg, median, p95, rho)."""
    out = defaultdict(lambda: defaultdict(list))
    if not nulls:
        return out
    cols = [c for c in ("mean", "sd", "min_angle_deg", "median", "p95", "rho", "sample") if c in nulls]
    for i in range(len(nulls["null"])):
        key = tuple(str(nulls[c][i]) if c in ("model", "kind") else int(nulls[c][i]) for c in key_cols) + (str(nulls["null"][i]),)
        for c in cols:
            out[key][c].append(nulls[c][i])
    return out


def compare(obs: dict, nulls: dict, types) -> dict:
    """One condition: observed stats against both nulls' samples."""
    sds = {t: np.asarray(nulls.get(t, {}).get("sd", []), float) for t in types}
    means = {t: np.asarray(nulls.get(t, {}).get("mean", []), float) for t in types}
    all_sd = np.concatenate([v for v in sds.values()]) if sds else np.array([])
    all_mean = np.concatenate([v for v in means.values()]) if means else np.array([])
    n = {t: int(sds[t].size) for t in types}
    res = {"obs_sd": obs["sd"], "obs_mean": obs["mean"], "n_samples": n}
    if all_sd.size == 0:
        return res | {"r": float("nan"), "exceeds_all": None, "mean_below_all": None, "mean_above_all": None}
    res.update(
        r=obs["sd"] / all_sd.max() if all_sd.max() > 0 else float("inf"),
        exceeds_all=bool(obs["sd"] > all_sd.max()),
        mean_below_all=bool(obs["mean"] < all_mean.min()),
        mean_above_all=bool(obs["mean"] > all_mean.max()),
        max_null_sd=float(all_sd.max()),
    )
    for t in types:
        if sds[t].size:
            res[f"p_sd_{t}"] = empirical_p(obs["sd"], sds[t], greater=True)
            res[f"ratio_mean_sd_{t}"] = obs["sd"] / sds[t].mean() if sds[t].mean() > 0 else float("inf")
            res[f"max_sd_{t}"] = float(sds[t].max())
    return res


def conditions(data: dict, fields: dict, types=None) -> list[dict]:
    """Every within-layer and cross-layer condition with its null comparison."""
    types = tuple(NULL_MODELS) if types is None else tuple(types)
    rows = []
    ow = observed_within(data.get("pk", {}), fields)
    nw = null_groups(data.get("pk_null_within", {}), ("model", "layer", "kind"))
    for (m, l, k), st in sorted(ow.items()):
        nd = {t: nw.get((m, l, k, t), {}) for t in types}
        if not any(nd.values()):
            continue
        rows.append({"model": m, "scope": "within", "kind": k, "layer": l, "layer_r": None,
                     "obs_min_angle": st["min_angle_deg"],
                     **{f"null_min_angle_{t}": float(np.nanmin(nd[t]["min_angle_deg"])) if nd.get(t) else float("nan")
                        for t in types},
                     **compare(st, nd, types)})
    oc = observed_cross(data.get("pk_cross", {}), fields)
    nc = null_groups(data.get("pk_null_cross", {}), ("model", "layer_w", "layer_r", "kind"))
    for (m, lw, lr, k), st in sorted(oc.items()):
        nd = {t: nc.get((m, lw, lr, k, t), {}) for t in types}
        if not any(nd.values()):
            continue
        rows.append({"model": m, "scope": "cross", "kind": k, "layer": lw, "layer_r": lr, **compare(st, nd, types)})
    return rows


def samples_text(cs) -> str:
    """The null sample counts n behind r (every value of every condition, e.g. "30" or "3/30")."""
    ns = sorted({n for c in cs for n in (c.get("n_samples") or {}).values() if n})
    return "/".join(str(n) for n in ns) if ns else "–"


# ------------------------------------------------------------------ tables


@table("pk_table5_writing", families=("pk",), params={"small_angle_deg": "tables/small_angle_deg"},
       headlines=(("mean_rho_median", "writing spaces: median over layers of mean pair ρ"),
                  ("iso", "d/D (mean ρ of isotropic subspaces)")))
def pk_table5_writing(pk: dict, models: list[str], fields: dict[str, dict], small_angle_deg: float = 10.0) -> Table:
    """**PK paper, Table 5.** Writing spaces within one layer: per model D, d, heads, layers, isotropic value
    d/D, the per-layer mean ρ of writing-space pairs (layer median, min, max), its dispersion SD over
    pairs (median, min, max), the random-subspace SD, and the layers holding a pair whose minimum
    principal angle is under {{ snakemake.params.small_angle_deg }}° (``tables.small_angle_deg``)."""
    cols = pk
    rows = []
    for m in models:
        f = fields[m]
        sel = (cols["model"] == m) & (cols["kind"] == "O")
        layers = np.unique(cols["layer"][sel])
        means, sds, small = [], [], 0
        for l in layers:
            s = sel & (cols["layer"] == l)
            rho = np.asarray(cols["rho"][s], dtype=float)
            means.append(rho.mean())
            sds.append(rho.std(ddof=0))
            small += int(np.any(np.asarray(cols["min_angle_deg"][s], dtype=float) < small_angle_deg))
        D, d = f["d_model"], f["d_head"]
        rows.append({
            "model": m, "D": D, "d": d, "heads": f["n_heads"], "layers": f["n_layers"],
            "iso": isotropic_rho(d, D),
            "mean_rho_median": nanstat(np.median, means), "mean_rho_min": nanstat(np.min, means),
            "mean_rho_max": nanstat(np.max, means),
            "sd_median": nanstat(np.median, sds), "sd_min": nanstat(np.min, sds), "sd_max": nanstat(np.max, sds),
            "random_sd": isotropic_sd(d, D),
            "layers_small_angle": small,
        })
    return Table(
        name="pk_table5_writing",
        caption="Mean and dispersion of ρ between writing spaces of one layer (layer median and range).",
        columns=[
            Column("model", "Model"), Column("D", "D"), Column("d", "d"), Column("heads", "Heads"), Column("layers", "Layers"),
            Column("iso", "Isotropic d/D", "{:.4f}"),
            Column("mean_rho_median", "Mean ρ (median)", "{:.3f}"), Column("mean_rho_min", "min", "{:.3f}"),
            Column("mean_rho_max", "max", "{:.3f}"),
            Column("sd_median", "SD (median)", "{:.3f}"), Column("sd_min", "min", "{:.3f}"), Column("sd_max", "max", "{:.3f}"),
            Column("random_sd", "Random-subspace SD", "{:.4f}"),
            Column("layers_small_angle", f"Layers with a pair < {small_angle_deg:g}°"),
        ],
        rows=rows,
    )



@table("pk_table1_min_angles", families=("pk", "pk_cross"))
def pk_table1_min_angles(data, fields, models) -> Table:
    """**PK paper, Table 1.** Minimum principal angle over head-subspace pairs, within a layer (O-O, Q-Q, K-K,
    V-V) and across layers (writer O of layer l against every Q/K/V reader of a later layer): pairs,
    minimum angle (and its sine and cosine), median pair angle and pairs under 1°."""
    rows = []
    pk, cross = data.get("pk", {}), data.get("pk_cross", {})
    for m in models:
        for scope, kind in COMPARISONS:
            src = pk if scope == "within" else cross
            if not src:
                continue
            sel = (src["model"] == m) & (src["kind"] == kind)
            ang = np.asarray(src["min_angle_deg"][sel], float)
            if ang.size == 0:
                continue
            lo = float(np.nanmin(ang))
            rows.append({"model": m, "comparison": _label(scope, kind), "pairs": int(sel.sum()),
                         "min_angle": lo, "median_angle": float(np.nanmedian(ang)),
                         "under_1deg": int(np.sum(ang < 1.0)),
                         "sin_min_angle": float(np.sin(np.deg2rad(lo))), "cos_min_angle": float(np.cos(np.deg2rad(lo)))})
    return Table("pk_table1_min_angles", "Minimum principal angle over head-subspace pairs within and across layers.",
                 [Column("model", "Model"), Column("comparison", "Comparison"), Column("pairs", "Pairs"),
                  Column("min_angle", "Min angle (°)", "{:.2f}"), Column("median_angle", "Median pair angle (°)", "{:.1f}"),
                  Column("under_1deg", "Pairs < 1°"), Column("sin_min_angle", "sin min angle", "{:.4f}"),
                  Column("cos_min_angle", "cos min angle", "{:.4f}")], rows)


@table("pk_table2_lower_bound", families=("pk_cross",))
def pk_table2_lower_bound(data, fields, models) -> Table:
    """**PK paper, Table 2.** Lower bound max_i ρ(R, U_i) ≥ λ_min(S)/H with reading spaces fixed: range of
    λ_min(S) over writer layers, layer pairs, the observed minimum over readers of the maximum overlap
    (Q/K/V), layer pairs where it falls below the isotropic value, and numerical violations of the bound
    (expected 0)."""
    oc = observed_cross(data.get("pk_cross", {}), fields)
    rows = []
    for m in models:
        f = fields[m]
        iso = isotropic_rho(f["d_head"], f["d_model"])
        keys = [k for k in oc if k[0] == m]
        if not keys:
            continue
        lam = {k[1]: oc[k]["lambda_min_S"] for k in keys}
        row = {"model": m, "lambda_min": min(lam.values()), "lambda_max": max(lam.values()),
               "layer_pairs": len({(k[1], k[2]) for k in keys})}
        violations = 0
        for kind in ("Q", "K", "V"):
            ks = [k for k in keys if k[3] == kind]
            if not ks:
                continue
            vals = [oc[k]["min_reader_max_rho"] for k in ks]
            row[f"min_{kind}"] = min(vals)
            row[f"below_iso_{kind}"] = int(sum(v < iso for v in vals))
            violations += sum(oc[k]["min_reader_max_rho"] < oc[k]["lambda_min_S"] / oc[k]["n_writers"] * (1 - 1e-9) for k in ks)
        row["bound_violations"] = int(violations)
        rows.append(row)
    return Table("pk_table2_lower_bound", "Lower bound max_i ρ(R, U_i) ≥ λ_min(S)/H with reading spaces fixed, and the observed minimum over readers.",
                 [Column("model", "Model"), Column("lambda_min", "λ_min(S) min", "{:.2e}"), Column("lambda_max", "λ_min(S) max", "{:.2e}"),
                  Column("layer_pairs", "Layer pairs"),
                  Column("min_Q", "min max ρ Q", "{:.3f}"), Column("min_K", "K", "{:.3f}"), Column("min_V", "V", "{:.3f}"),
                  Column("below_iso_Q", "Below d/D Q"), Column("below_iso_K", "K"), Column("below_iso_V", "V"),
                  Column("bound_violations", "Bound violations")], rows,
                 notes="Bound violations counts layer pairs and kinds where the proposition's bound fails numerically (expected 0).")


@table("pk_table3_models")
def pk_table3_models(fields, models) -> Table:
    """**PK paper, Table 3.** Models and isotropic values: D, d, query / key-value heads, layers, writing-space
    pairs per layer, the sum of the query heads' widths H d, d/D and the random-subspace SD (from the
    fetched manifests)."""
    rows = []
    for m in models:
        f = fields[m]
        H = f["n_heads"]
        rows.append({"model": m, "D": f["d_model"], "d": f["d_head"], "heads": f"{H} / {f['n_kv_heads']}",
                     "layers": f["n_layers"], "writer_pairs": H * (H - 1) // 2, "width": H * f["d_head"],
                     "iso": isotropic_rho(f["d_head"], f["d_model"]), "random_sd": isotropic_sd(f["d_head"], f["d_model"])})
    return Table("pk_table3_models", "Models and isotropic values.",
                 [Column("model", "Model"), Column("D", "D"), Column("d", "d"), Column("heads", "Heads (q / kv)"),
                  Column("layers", "Layers"), Column("writer_pairs", "Writer pairs per layer"), Column("width", "H d"),
                  Column("iso", "Isotropic d/D", "{:.4f}"), Column("random_sd", "Random SD", "{:.4f}")], rows)


def _null_verdict(row: dict) -> tuple[str, str]:
    """The run summary's line for one comparison: how many of its conditions exceed all null samples."""
    return (f"null verdict, {row['comparison']}",
            f"{row['exceeds_all']} of {row['conditions']} conditions above all {row['samples']} samples")


@table("pk_table4_null_summary", families=ALL4, params=NULLS, headline_rows=_null_verdict)
def pk_table4_null_summary(data, fields, models, null_types) -> Table:
    """**PK paper, Table 4.** Dispersion of ρ against both null models (null types: {{
    snakemake.params.null_types|join(', ') }}; samples per null from ``pk.nulls``): conditions (layers
    or layer pairs), conditions whose SD exceeds every null sample, median r = SD / max null SD, and the
    median ratio of SD to each null's mean SD."""
    conds, types = conditions(data, fields, null_types), null_types
    rows = []
    for m in models:
        for scope, kind in COMPARISONS:
            cs = [c for c in conds if c["model"] == m and c["scope"] == scope and c["kind"] == kind]
            if not cs:
                continue
            ns = sorted({n for c in cs for n in c["n_samples"].values()})
            rows.append({"model": m, "comparison": _label(scope, kind), "conditions": len(cs),
                         "samples": "/".join(str(n) for n in ns),
                         "exceeds_all": int(sum(bool(c["exceeds_all"]) for c in cs)),
                         "median_r": float(np.median([c["r"] for c in cs])),
                         **{f"median_ratio_{t}": float(np.median([c.get(f"ratio_mean_sd_{t}", np.nan) for c in cs]))
                            for t in types}})
    return Table("pk_table4_null_summary", "Dispersion against both null models: conditions whose SD exceeds every null sample, r = SD / max null SD.",
                 [Column("model", "Model"), Column("comparison", "Comparison"), Column("conditions", "Conditions"),
                  Column("samples", "Samples per null"), Column("exceeds_all", "Exceeds all"),
                  Column("median_r", "Median r", "{:.2f}"),
                  *(Column(f"median_ratio_{t}", f"Median SD / {NULL_MODELS[t].label} mean", "{:.1f}") for t in types)],
                 rows)


@table("pk_table6_min_angle_vs_nulls", families=WITHIN, params=NULLS)
def pk_table6_min_angle_vs_nulls(data, fields, models, null_types) -> Table:
    """**PK paper, Table 6.** Layers whose observed minimum writing-space angle is not below every
    sample of a null that keeps the columns (column reassignment; of the null types {{
    snakemake.params.null_types|join(', ') }}): observed minimum angle and the minimum over that null's
    samples."""
    nulls = [t for t in null_types if NULL_MODELS[t].keeps_columns]
    conds = conditions(data, fields, null_types)
    rows = []
    for t in nulls:
        for c in conds:
            if c["scope"] == "within" and c["kind"] == "O" and c["model"] in models:
                null_min = c.get(f"null_min_angle_{t}", float("nan"))
                if np.isfinite(null_min) and not (c["obs_min_angle"] < null_min):
                    rows.append({"model": c["model"], "layer": c["layer"], "null": t, "obs_min_angle": c["obs_min_angle"],
                                 "null_min": null_min, "samples": (c.get("n_samples") or {}).get(t, "–")})
    label = " / ".join(NULL_MODELS[t].label for t in nulls) or "column-keeping null"
    null_col = [Column("null", "Null")] if len(nulls) > 1 else []
    return Table("pk_table6_min_angle_vs_nulls", f"Layers whose observed minimum writing-space angle is not below every {label} sample.",
                 [Column("model", "Model"), Column("layer", "Layer"), *null_col,
                  Column("obs_min_angle", "Observed min angle (°)", "{:.3f}"),
                  Column("null_min", f"Min over {label} samples (°)", "{:.3f}"),
                  Column("samples", f"{label.capitalize()} samples")], rows)


@table("pk_table7_reading_within", families=WITHIN, params=NULLS)
def pk_table7_reading_within(data, fields, models, null_types) -> Table:
    """**PK paper, Table 7.** Overlap between same-kind reading spaces within a layer: pairs per layer, layer
    range of mean ρ, layers whose mean is below all null samples, range of the SD, layers whose SD is
    above all null samples, and the minimum angle over all pairs."""
    conds = conditions(data, fields, null_types)
    ow = observed_within(data.get("pk", {}), fields)
    rows = []
    for m in models:
        for kind in ("Q", "K", "V"):
            st = {l: s for (mm, l, k), s in ow.items() if mm == m and k == kind}
            if not st:
                continue
            cs = [c for c in conds if c["model"] == m and c["scope"] == "within" and c["kind"] == kind]
            rows.append({"model": m, "kind": kind, "pairs": next(iter(st.values()))["n_pairs"],
                         "mean_range": _rng([s["mean"] for s in st.values()]),
                         "mean_below_all": f"{sum(bool(c['mean_below_all']) for c in cs)} / {len(cs)}" if cs else "–",
                         "sd_range": _rng([s["sd"] for s in st.values()]),
                         "sd_above_all": f"{sum(bool(c['exceeds_all']) for c in cs)} / {len(cs)}" if cs else "–",
                         "samples": samples_text(cs),
                         "min_angle": float(np.nanmin([s["min_angle_deg"] for s in st.values()]))})
    return Table("pk_table7_reading_within", "Overlap between same-kind reading spaces within a layer, against the null models.",
                 [Column("model", "Model"), Column("kind", "Reading"), Column("pairs", "Pairs per layer"),
                  Column("mean_range", "Mean ρ (layer range)"), Column("mean_below_all", "Layers mean below all nulls"),
                  Column("sd_range", "SD (range)"), Column("sd_above_all", "Layers SD above all nulls"),
                  Column("samples", "Samples per null"), Column("min_angle", "Min angle (°)", "{:.2f}")], rows)


@table("pk_table8_cross_nulls", families=CROSS, params=NULLS)
def pk_table8_cross_nulls(data, fields, models, null_types) -> Table:
    """**PK paper, Table 8.** Writer-reader overlap across layers against the null models (null types:
    {{ snakemake.params.null_types|join(', ') }}), per reading kind: layer pairs, layer pairs whose SD
    exceeds all null samples, median SD / mean SD of each spectrum-keeping null (rotation), and layer
    pairs whose mean is below / above all null samples."""
    spectral = [t for t in null_types if NULL_MODELS[t].keeps_spectrum]
    conds = conditions(data, fields, null_types)
    rows = []
    for m in models:
        for kind in ("Q", "K", "V"):
            cs = [c for c in conds if c["model"] == m and c["scope"] == "cross" and c["kind"] == kind]
            if not cs:
                continue
            rows.append({"model": m, "kind": kind, "layer_pairs": len(cs),
                         "exceeds_all": int(sum(bool(c["exceeds_all"]) for c in cs)),
                         **{f"median_ratio_{t}": float(np.median([c.get(f"ratio_mean_sd_{t}", np.nan) for c in cs]))
                            for t in spectral},
                         "mean_below_all": int(sum(bool(c["mean_below_all"]) for c in cs)),
                         "mean_above_all": int(sum(bool(c["mean_above_all"]) for c in cs)),
                         "samples": samples_text(cs)})
    return Table("pk_table8_cross_nulls", "Dispersion of writer-reader overlap across layers against the null models.",
                 [Column("model", "Model"), Column("kind", "Reading"), Column("layer_pairs", "Layer pairs"),
                  Column("exceeds_all", "SD exceeds all nulls"),
                  *(Column(f"median_ratio_{t}", f"Median SD / {NULL_MODELS[t].label} mean", "{:.1f}") for t in spectral),
                  Column("mean_below_all", "Mean below all"), Column("mean_above_all", "Mean above all"),
                  Column("samples", "Samples per null")], rows)


@table("pk_table9_weighted", families=("pk_cross",))
def pk_table9_weighted(data, fields, models, top: int = 3) -> Table:
    """**PK paper, Table 9.** Largest ρ and largest spectral-weighted measure D‖RB‖²/(‖R‖²‖B‖²) per writer →
    reader layer pair (top three by each), with the mean weighted measure."""
    oc = observed_cross(data.get("pk_cross", {}), fields)
    rows = []
    for m in models:
        ks = [k for k in oc if k[0] == m]
        picked = sorted(ks, key=lambda k: -oc[k]["max"])[:top] + sorted(ks, key=lambda k: -oc[k]["max_weighted"])[:top]
        seen = set()
        for k in picked:
            if k in seen:
                continue
            seen.add(k)
            rows.append({"model": m, "pair": f"{k[1]} → {k[2]}, {k[3]}", "max_rho": oc[k]["max"],
                         "max_weighted": oc[k]["max_weighted"], "mean_weighted": oc[k]["mean_weighted"]})
    return Table("pk_table9_weighted", "Largest ρ and largest spectral-weighted measure D‖RB‖²/(‖R‖²‖B‖²) per layer pair (top by each).",
                 [Column("model", "Model"), Column("pair", "Layer pair, reading"), Column("max_rho", "Max ρ", "{:.3f}"),
                  Column("max_weighted", "Max weighted", "{:.2f}"), Column("mean_weighted", "Mean weighted", "{:.2f}")], rows)


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
                         "observed": _rng(s["observed"][sel]), "null_mean": _rng(s["null_mean"][sel]),
                         "p_max": float(np.nanmax(p)) if np.isfinite(p).any() else float("nan"),
                         "n_null": int(np.max(s["n_null"][sel])), "exact": bool(np.all(s["exact"][sel]))})
    return Table("pk_appendix_h_self_overlap", "Self-head overlap: mean_h ρ between a head's spaces against label permutations (GQA: all group labellings).",
                 [Column("model", "Model"), Column("test", "Test"), Column("layers", "Layers"), Column("observed", "Observed (range)"),
                  Column("null_mean", "Permutation mean (range)"), Column("p_max", "Max p", "{:.4f}"),
                  Column("n_null", "Permutations"), Column("exact", "Exhaustive")], rows,
                 notes="V_vs_O: each head's writing space vs its own (group's) V reading space; Q_vs_K: Q vs own group's K; Q_vs_O: Q vs own writing space. Undefined with one KV group.")


def agreeing_decimals(a: float, b: float, most: int = 10) -> int:
    """The most decimal places k ≤ most at which a and b round alike (round(a, k) == round(b, k) for
    every k up to it); -1 when they differ already at the units."""
    k = -1
    while k < most and round(float(a), k + 1) == round(float(b), k + 1):
        k += 1
    return k


@table("pk_appendix_e_base_instruct", families=("pk",), derived=("pairs",))
def pk_appendix_e_base_instruct(data, fields, pairs: list[tuple[str, str]]) -> Table:
    """**PK paper, Appendix E (base vs instruct).** Base against instruct (models with ``pair:``): absolute
    per-layer differences of writing-space mean ρ, SD and minimum angle, and the decimal places to which
    the layers' mean ρ and SD agree."""
    pairs = [tuple(x) for x in pairs]
    ow = observed_within(data.get("pk", {}), fields)
    rows = []
    for base, inst in pairs:
        layers = sorted({l for (m, l, k) in ow if m == base and k == "O"} & {l for (m, l, k) in ow if m == inst and k == "O"})
        diffs, digits = [], []
        for l in layers:
            a, b = ow[(base, l, "O")], ow[(inst, l, "O")]
            diffs.append([abs(a[s] - b[s]) for s in ("mean", "sd", "min_angle_deg")])
            digits.append(min(agreeing_decimals(a[s], b[s]) for s in ("mean", "sd")))
        d = np.asarray(diffs) if diffs else np.full((1, 3), np.nan)
        rows.append({"base": base, "instruct": inst, "layers": len(layers),
                     "median_abs_mean": float(np.median(d[:, 0])), "max_abs_mean": float(np.max(d[:, 0])),
                     "median_abs_sd": float(np.median(d[:, 1])), "median_abs_angle": float(np.median(d[:, 2])),
                     "digits": f"{min(digits)} – {max(digits)}" if digits else "–"})
    return Table("pk_appendix_e_base_instruct", "Base vs instruct: absolute per-layer differences of writing-space statistics.",
                 [Column("base", "Base"), Column("instruct", "Instruct"), Column("layers", "Layers"),
                  Column("median_abs_mean", "Median |Δ mean ρ|", "{:.2e}"), Column("max_abs_mean", "Max |Δ mean ρ|", "{:.2e}"),
                  Column("median_abs_sd", "Median |Δ SD|", "{:.2e}"), Column("median_abs_angle", "Median |Δ min angle| (°)", "{:.3f}"),
                  Column("digits", "Decimals agreeing (layers)")],
                 rows, notes=("Decimals agreeing: per layer, the most decimal places to which base and instruct round "
                              "both mean ρ and SD alike (at most 10), range over layers." if rows else
                              "No base/instruct pair (models with `pair:`) among the active models."))


@table("pk_sec5_1_ranks", families=("pk",))
def pk_sec5_1_ranks(provs: dict, models) -> Table:
    """**PK paper, §5.1 setup (ranks and direct sums).** Numerical ranks of the head spaces at relative
    tolerance ``rank_rtol`` (smallest and largest head rank, rank of the layer's sum), the direct-sum
    defect Σ_i rank − rank of the sum against the defect forced by dimension, max(0, H d − D), layers
    above the forced defect, and what was folded into the reading spaces."""
    # Numerical ranks of head spaces and the direct-sum defect, from the pk shards' provenance.
    provs_pk = provs["pk"]  # ranks and defects are in the pk shards' provenance
    acc = defaultdict(lambda: {"ranks": [], "defect": [], "expected": [], "layer_rank": [], "folded": set()})
    for p in provs_pk:
        prov = p["provenance"]
        for kind, f in prov.get("layer_facts", {}).items():
            a = acc[(prov["model"], kind)]
            a["ranks"] += f["ranks"]
            a["defect"].append(f["direct_sum_defect"])
            a["expected"].append(f["expected_defect"])
            a["layer_rank"].append(f["layer_rank"])
            a["folded"].add(prov.get("folded", "") if kind != "O" else "–")
    rows = []
    for m in models:
        for kind in ("O", "Q", "K", "V"):
            a = acc.get((m, kind))
            if not a:
                continue
            excess = [d - e for d, e in zip(a["defect"], a["expected"])]
            rows.append({"model": m, "kind": kind, "rank_min": min(a["ranks"]), "rank_max": max(a["ranks"]),
                         "layer_rank": _rng(a["layer_rank"], "{:.0f}"), "defect_max": max(a["defect"]),
                         "expected": max(a["expected"]), "layers_excess": int(sum(x > 0 for x in excess)),
                         "folded": "; ".join(sorted(a["folded"]))})
    return Table("pk_sec5_1_ranks", "Numerical ranks (relative tolerance rank_rtol) and direct-sum defect Σ rank − rank of the sum vs the forced max(0, H d − D).",
                 [Column("model", "Model"), Column("kind", "Space"), Column("rank_min", "Head rank min"), Column("rank_max", "max"),
                  Column("layer_rank", "Rank of the sum (layers)"), Column("defect_max", "Max defect"),
                  Column("expected", "Forced defect"), Column("layers_excess", "Layers above forced"),
                  Column("folded", "Folded into reading spaces")], rows)


@table("pk_sec5_3_wo_spectrum", families=("pk",))
def pk_sec5_3_wo_spectrum(provs: dict, models) -> Table:
    """**PK paper, §5.3 (singular values of W_O per layer).** The singular values of each layer's
    output projection W_O^l = [W_O^1 … W_O^H] (D x H d), from the pk shards' layer facts: how many,
    the three largest, the median (the bulk), the 10th and 90th percentiles, and the largest over the
    median."""
    # One row per model and layer, from the spectrum the pk job keeps in its layer facts.
    rows = []
    for p in provs["pk"]:
        prov = p["provenance"]
        sv = (prov.get("layer_facts", {}).get("O") or {}).get("singular_values")
        if prov["model"] not in models or sv is None:
            continue
        sv = np.sort(np.asarray(sv, float))[::-1]
        top = [float(sv[k]) if sv.size > k else None for k in range(3)]
        med = float(np.median(sv)) if sv.size else float("nan")
        rows.append({"model": prov["model"], "layer": int(prov["layer"]), "n": int(sv.size),
                     "s1": top[0], "s2": top[1], "s3": top[2], "median": med,
                     "p10": finite_quantile(sv, 0.10), "p90": finite_quantile(sv, 0.90),
                     "s1_over_median": top[0] / med if top[0] is not None and med > 0 else None})
    rows.sort(key=lambda r: (models.index(r["model"]), r["layer"]))
    return Table("pk_sec5_3_wo_spectrum", "Singular values of each layer's W_O^l (D x H d).",
                 [Column("model", "Model"), Column("layer", "Layer"), Column("n", "Singular values"),
                  Column("s1", "s1", "{:.3f}"), Column("s2", "s2", "{:.3f}"), Column("s3", "s3", "{:.3f}"),
                  Column("median", "Median (bulk)", "{:.3f}"), Column("p10", "p10", "{:.3f}"),
                  Column("p90", "p90", "{:.3f}"), Column("s1_over_median", "s1 / median", "{:.2f}")], rows)


@table("pk_fig3_fig9_conditions", families=ALL4, params=NULLS)
def pk_fig3_fig9_conditions(data, fields, models, null_types) -> Table:
    """**PK paper, every condition (Figures 3 and 9 data).** One row per layer (within-layer pairs of each
    kind) and per writer → reader layer pair (across layers, per reading kind): pairs, mean, SD, median,
    95th percentile and maximum of ρ, minimum angle, shares above 2 d/D and below d/(2D), r = SD /
    largest null SD, the empirical p of the SD against each null ((k+1)/(n+1)), and whether the mean
    lies below / above every null sample (null types: {{ snakemake.params.null_types|join(', ') }})."""
    # Every layer (within) and layer pair (across): statistics and null comparison.
    conds, types = conditions(data, fields, null_types), null_types
    ow = observed_within(data.get("pk", {}), fields)
    oc = observed_cross(data.get("pk_cross", {}), fields)
    cmp = {(c["model"], c["scope"], c["kind"], c["layer"], c["layer_r"]): c for c in conds}
    rows = []
    for src, scope in ((ow, "within"), (oc, "cross")):
        for key, st in sorted(src.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
            if key[0] not in models:
                continue
            m, l = key[0], key[1]
            lr, kind = (None, key[2]) if scope == "within" else (key[2], key[3])
            c = cmp.get((m, scope, kind, l, lr), {})
            rows.append({"model": m, "scope": scope, "kind": kind, "layer": l, "layer_r": lr,
                         **{k: st[k] for k in ("n_pairs", "mean", "sd", "median", "p95", "max", "min_angle_deg",
                                                "share_above_2iso", "share_below_half_iso")},
                         "r": c.get("r"), "n_samples": samples_text([c]) if c else "–",
                         **{f"p_sd_{t}": c.get(f"p_sd_{t}") for t in types},
                         "mean_below_all": c.get("mean_below_all"), "mean_above_all": c.get("mean_above_all")})
    cols = [Column("model", "Model"), Column("scope", "Scope"), Column("kind", "Kind"), Column("layer", "Layer"),
            Column("layer_r", "Reader layer"), Column("n_pairs", "Pairs"), Column("mean", "Mean ρ", "{:.4f}"),
            Column("sd", "SD", "{:.4f}"), Column("median", "Median", "{:.4f}"), Column("p95", "p95", "{:.4f}"),
            Column("max", "Max", "{:.4f}"), Column("min_angle_deg", "Min angle (°)", "{:.2f}"),
            Column("share_above_2iso", "Share > 2 d/D", "{:.3f}"), Column("share_below_half_iso", "Share < d/(2D)", "{:.3f}"),
            Column("r", "r", "{:.2f}"), Column("n_samples", "n per null"),
            *(Column(f"p_sd_{t}", f"p ({t})", "{:.3f}") for t in types),
            Column("mean_below_all", "Mean below all"),
            Column("mean_above_all", "Mean above all")]
    return Table("pk_fig3_fig9_conditions", "Per layer (within) and per writer→reader layer pair (across): ρ statistics and the null comparison; p = (k+1)/(n+1) for the SD.", cols, rows)


# ------------------------------------------------------------------ figures



def fig2_layer(ow: dict, model: str) -> int:
    """The layer at the upper median of per-layer writing-space dispersion (fixed in advance)."""
    sds = sorted((s["sd"], l) for (m, l, k), s in ow.items() if m == model and k == "O")
    return sds[len(sds) // 2][1]


def random_subspace(rng: np.random.Generator, d_model: int, d_head: int) -> np.ndarray:
    """Orthonormal basis (d_model x d_head) of a uniformly random d_head-dim subspace (QR of a
    Gaussian matrix, signs fixed by R's diagonal)."""
    Q, R = np.linalg.qr(rng.standard_normal((d_model, d_head)))
    return Q * np.sign(np.diag(R))


def random_layer_rho(model: str, layer: int, sample: int, n_heads: int, d_model: int, d_head: int) -> np.ndarray:
    """ρ of every unordered pair among n_heads independent random d_head-dim subspaces of
    R^d_model: one sample of the random-subspace reference for a layer of that shape (seeded by
    model, layer, sample)."""
    rng = rng_for(model, layer, -1, sample, "pk_fig2_random")
    U = np.stack([random_subspace(rng, d_model, d_head) for _ in range(n_heads)])
    out = [np.sum((U[i].T @ U[i + 1:]) ** 2, axis=(1, 2)) / d_head for i in range(n_heads - 1)]
    return np.concatenate(out) if out else np.array([])


def random_reference(model: str, d_model: int, d_head: int, draws: int) -> np.ndarray:
    """ρ of ``draws`` independent pairs of random d_head-dim subspaces (PK §5.3: "0.0834 ± 0.0018,
    100 samples" at D = 768, d = 64); seeded by (model, draw)."""
    out = np.empty(draws)
    for k in range(draws):
        rng = rng_for(model, -1, -1, k, "pk_random_reference")
        U, V = random_subspace(rng, d_model, d_head), random_subspace(rng, d_model, d_head)
        out[k] = np.sum((U.T @ V) ** 2) / d_head
    return out


def _ccdf_on(samples, grid) -> np.ndarray:
    """Fraction of each sample's values >= every grid point: (samples, grid)."""
    out = np.empty((len(samples), grid.size))
    for k, s in enumerate(samples):
        s = np.sort(np.asarray(s, float))
        out[k] = 1.0 - np.searchsorted(s, grid, side="left") / s.size
    return out


@figure("pk_fig2_rho_ccdf_nulls", families=WITHIN, params=NULLS | {"random_samples": "figures/pk_fig2_random_samples"})
def pk_fig2_rho_ccdf_nulls(data, fields, models, null_types, random_samples: int = 30):
    """**PK paper, Figure 2.** Fraction of writing-space pairs with overlap ≥ ρ in the layer at the upper
    median of per-layer dispersion: observed (black staircase) against each null model and random
    subspaces ({{ snakemake.params.random_samples }} samples of the layer's shape;
    ``figures.pk_fig2_random_samples``): the curve of each sample, their median (line) and 5-95
    percentile band; dotted at d/D. Cited counts: table ``pk_fig2_counts``."""
    types, random_samples = null_types, int(random_samples)
    plt = pyplot()
    ow = observed_within(data.get("pk", {}), fields)
    nw = null_groups(data.get("pk_null_within", {}), ("model", "layer", "kind"))
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False)
    picks = {}
    for ax, m in zip(axes[0], models):
        layer = fig2_layer(ow, m)
        picks[m] = layer
        rho = ow[(m, layer, "O")]["rho"]
        f = fields[m]
        bands = [(null, nw.get((m, layer, "O", null), {}).get("rho", []), f"C{i}") for i, null in enumerate(types)]
        if random_samples:
            rand = [random_layer_rho(m, layer, k, f["n_heads"], f["d_model"], f["d_head"]) for k in range(random_samples)]
            bands.append(("random subspaces", rand, "C7"))
        top = max([rho.max()] + [np.max(s) for _, ss, _ in bands for s in ss] + [1e-9])
        grid = np.linspace(0, top * 1.02, 600)
        for label, samples, color in bands:
            if not len(samples):
                continue
            lo, med, hi = np.percentile(_ccdf_on(samples, grid), [5, 50, 95], axis=0)
            ax.fill_between(grid, lo, hi, color=color, alpha=0.25, lw=0)
            ax.plot(grid, med, color=color, lw=1.2, label=f"{label} (median, 5–95%; n = {len(samples)})")
        step_ccdf(ax, rho, color="k", lw=1.4, label="observed")
        ax.axvline(f["d_head"] / f["d_model"], ls=":", color="gray")
        ax.set_yscale("log")
        ax.set_ylim(0.5 / max(rho.size, 1), 1.5)
        ax.set_title(f"{m}, layer {layer} ({rho.size} pairs)", fontsize=9)
        ax.set_xlabel("ρ (writing-space pairs)")
        ax.legend(fontsize=6, loc="lower left")
    axes[0][0].set_ylabel("fraction of pairs with overlap ≥ ρ")
    fig.tight_layout()
    return fig, {"layers": picks, "random_samples": int(random_samples)}


@table("pk_fig2_counts", families=WITHIN, params=NULLS | {"reference_draws": "figures/pk_random_reference_draws"})
def pk_fig2_counts(data, fields, models, null_types, reference_draws: int = 100) -> Table:
    """**PK paper, Figure 2 and §5.3 counts.** Per model, the Figure 2 layer (upper median of per-layer
    dispersion): pairs, median, 95th percentile and maximum of ρ, pairs below every value and above
    every value of each null's samples; over the layers with null samples, those whose median lies below
    every null sample's median and whose 95th percentile lies above every null sample's; and the sampled
    random-subspace reference, mean ± SD of ρ over {{ snakemake.params.reference_draws }} random pairs
    (``figures.pk_random_reference_draws``), beside d/D and the analytic SD."""
    # Figure 2's cited counts (PK §5.3): for the Figure 2 layer of each model, the observed
    # median / p95 / max and the pairs below every value / above every value of each null (all its
    # samples pooled); over all layers with null samples, the layers whose median lies below every
    # null sample's median and whose p95 lies above every null sample's p95; and the sampled
    # random-subspace reference (mean ± SD of ρ over ``reference_draws`` random pairs) beside the
    # analytic one.
    types, reference_draws = null_types, int(reference_draws)
    ow = observed_within(data.get("pk", {}), fields)
    nw = null_groups(data.get("pk_null_within", {}), ("model", "layer", "kind"))
    rows = []
    for m in models:
        if not any(k[0] == m and k[2] == "O" for k in ow):
            continue
        f = fields[m]
        layer = fig2_layer(ow, m)
        st = ow[(m, layer, "O")]
        rho = st["rho"]
        row = {"model": m, "layer": layer, "pairs": int(rho.size), "median": st["median"], "p95": st["p95"],
               "max": st["max"]}
        for t in types:
            samples = nw.get((m, layer, "O", t), {}).get("rho", [])
            vals = np.concatenate([np.asarray(s, float) for s in samples]) if len(samples) else np.array([])
            row[f"n_{t}"] = len(samples)
            row[f"below_all_{t}"] = int(np.sum(rho < vals.min())) if vals.size else None
            row[f"above_all_{t}"] = int(np.sum(rho > vals.max())) if vals.size else None
        med_below = p95_above = n_lay = 0
        for (mm, l, k), s in ow.items():
            if mm != m or k != "O":
                continue
            meds = np.concatenate([np.asarray(nw.get((m, l, "O", t), {}).get("median", []), float) for t in types])
            p95s = np.concatenate([np.asarray(nw.get((m, l, "O", t), {}).get("p95", []), float) for t in types])
            if meds.size == 0:
                continue
            n_lay += 1
            med_below += int(s["median"] < meds.min())
            p95_above += int(s["p95"] > p95s.max())
        row["layers_nulls"] = n_lay
        row["layers_median_below"] = med_below if n_lay else None
        row["layers_p95_above"] = p95_above if n_lay else None
        ref = random_reference(m, f["d_model"], f["d_head"], reference_draws) if reference_draws else np.array([])
        row.update(ref_draws=int(reference_draws), ref_mean=float(ref.mean()) if ref.size else float("nan"),
                   ref_sd=float(ref.std(ddof=1)) if ref.size > 1 else float("nan"),
                   iso=isotropic_rho(f["d_head"], f["d_model"]), iso_sd=isotropic_sd(f["d_head"], f["d_model"]))
        rows.append(row)
    cols = [Column("model", "Model"), Column("layer", "Figure 2 layer"), Column("pairs", "Pairs"),
            Column("median", "Median ρ", "{:.3f}"), Column("p95", "p95", "{:.3f}"), Column("max", "Max", "{:.3f}")]
    for t in types:
        lab = NULL_MODELS[t].label
        cols += [Column(f"n_{t}", f"{lab} samples"), Column(f"below_all_{t}", f"Pairs below all {lab} values"),
                 Column(f"above_all_{t}", f"Pairs above all {lab} values")]
    cols += [Column("layers_nulls", "Layers with null samples"),
             Column("layers_median_below", "Layers: median below every null sample's"),
             Column("layers_p95_above", "Layers: p95 above every null sample's"),
             Column("ref_draws", "Random draws"), Column("ref_mean", "Random ρ mean", "{:.4f}"),
             Column("ref_sd", "Random ρ SD", "{:.5f}"), Column("iso", "d/D", "{:.4f}"),
             Column("iso_sd", "Analytic SD", "{:.5f}")]
    return Table("pk_fig2_counts", "Figure 2's cited counts: the Figure 2 layer against each null's values, layers whose "
                 "quantiles pass every null sample, and the sampled random-subspace reference.", cols, rows,
                 notes="Below / above all: observed pairs under the smallest / over the largest ρ of that null's "
                       "samples pooled. Layer counts pool both nulls' samples. Random: ρ of independent pairs of "
                       "uniformly random d-dimensional subspaces of R^D (mean ± SD, ddof 1).")


def n_key(c: dict) -> str:
    """A condition's null sample counts, e.g. 'n = 30' or 'n = 3/30' (r depends on n)."""
    ns = sorted({int(v) for v in c["n_samples"].values() if v})
    return "n = " + "/".join(str(n) for n in ns) if ns else "n = 0"


LOW_FRACTION = 0.1  # pk_appendix_f_layer_stats.min_angle_low: a layer among the lowest 10 % of its model's angles
ISO_BAND = 0.01  # pk_appendix_f_cross_distance.in_band_onward: the band about d/D (App. F's "d/D ± 0.01")
MAX_LABELLED = 3  # Figure 3 labels the points below r = 1 of a column when it has at most this many


@figure("pk_fig3_r", families=ALL4, params=NULLS)
def pk_fig3_r(data, fields, models, null_types):
    """**PK paper, Figure 3.** r = observed SD / largest null SD for every within-layer and cross-layer
    comparison (log scale); bars at the median, numbers count r > 1; dashed at r = 1."""
    return draw_fig3(conditions(data, fields, null_types), models)


def draw_fig3(conds, models):
    """r per condition, one column per (model, comparison). Conditions whose null sample count
    differs from the most common one get their own panel (r = SD / max null SD depends on n; PK
    Figure 3 shows Qwen3-235B layer 46, n = 3, apart); points below r = 1 are triangles labelled
    with their condition and r."""
    plt = pyplot()
    ok = [c for c in conds if c["model"] in models and np.isfinite(c["r"]) and c["r"] > 0]
    counts = Counter(n_key(c) for c in ok)
    groups = [k for k, _ in counts.most_common()] or ["n = 0"]
    ncols = {g: sum(1 for m in models for sc, kd in COMPARISONS
                    if any(c["model"] == m and c["scope"] == sc and c["kind"] == kd and n_key(c) == g for c in ok))
             for g in groups}
    widths = [max(ncols[g], 1) for g in groups]
    fig, axes = plt.subplots(1, len(groups), figsize=(max(6.0, 0.55 * sum(widths) + 1.5 * len(groups)), 4.2),
                             squeeze=False, gridspec_kw={"width_ratios": widths})
    below = []
    for ax, g in zip(axes[0], groups):
        labels, x = [], 0
        for m in models:
            for scope, kind in COMPARISONS:
                cs = [c for c in ok if c["model"] == m and c["scope"] == scope and c["kind"] == kind and n_key(c) == g]
                if not cs:
                    continue
                r = np.array([c["r"] for c in cs], float)
                jitter = (np.random.default_rng(x).random(r.size) - 0.5) * 0.4
                hi = r >= 1
                ax.scatter((x + jitter)[hi], r[hi], s=6, alpha=0.6, color=f"C{x % 10}")
                few = int(np.sum(~hi)) <= MAX_LABELLED
                for c, xx, rr in zip(np.array(cs, dtype=object)[~hi], (x + jitter)[~hi], r[~hi]):
                    ax.scatter([xx], [rr], marker="v", s=36, color="C3", edgecolor="k", lw=0.5, zorder=3)
                    where = f"layer {c['layer']}" if c["scope"] == "within" else f"{c['layer']}→{c['layer_r']}"
                    below.append((m, scope, kind, where, rr))
                    if few:
                        ax.annotate(f"{where}: r = {rr:.3f}", (xx, rr), xytext=(4, -2), textcoords="offset points",
                                    fontsize=6, color="C3")
                if not hi.all() and not few:
                    ax.text(x, r.min() / 1.35, f"{int(np.sum(~hi))} < 1", ha="center", va="top", fontsize=6, color="C3")
                ax.hlines(np.median(r), x - 0.3, x + 0.3, color="k")
                ax.text(x, r.max() * 1.15, str(int(np.sum(r > 1))), ha="center", fontsize=6)
                tag = ("W" + ("" if kind == "O" else kind)) if scope == "within" else f"W→{kind}"
                labels.append(f"{m}\n{tag}")
                x += 1
        ax.axhline(1, ls="--", color="gray")
        ax.set_yscale("log")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=6, rotation=45, ha="right", rotation_mode="anchor")
        ax.set_xlim(-0.7, max(len(labels), 1) - 0.3)
        ax.set_title(f"{g} samples per null" + (" (shown apart)" if g != groups[0] else ""), fontsize=8)
    axes[0][0].set_ylabel("r = SD / max null SD")
    fig.suptitle("Dispersion against both null models (numbers: conditions with r > 1; triangles: r < 1)", fontsize=9)
    fig.tight_layout()
    return fig, {"sample_groups": groups,
                 "below_one": [{"model": m, "scope": sc, "kind": k, "where": w, "r": float(r)} for m, sc, k, w, r in below]}


def _integer_layers(fig):
    """Layer axes show whole layers (no 2.5)."""
    from matplotlib.ticker import MaxNLocator

    for a in fig.axes:
        a.xaxis.set_major_locator(MaxNLocator(integer=True))


@figure("pk_fig6_depth", families=("pk",))
def pk_fig6_depth(data, fields, models):
    """**PK paper, Figure 6.** Depth profile of the mean (top) and dispersion (bottom) of writing-space ρ;
    dotted: isotropic value and random-subspace SD."""
    plt = pyplot()
    ow = observed_within(data.get("pk", {}), fields)
    fig, axes = plt.subplots(2, len(models), figsize=(4 * len(models), 5), squeeze=False)
    for j, m in enumerate(models):
        f = fields[m]
        ls = sorted(l for (mm, l, k) in ow if mm == m and k == "O")
        axes[0][j].plot(ls, [ow[(m, l, "O")]["mean"] for l in ls], "o-", ms=3)
        axes[0][j].axhline(isotropic_rho(f["d_head"], f["d_model"]), ls=":", color="gray")
        axes[0][j].set_title(m, fontsize=9)
        axes[1][j].plot(ls, [ow[(m, l, "O")]["sd"] for l in ls], "o-", ms=3, color="C1")
        axes[1][j].axhline(isotropic_sd(f["d_head"], f["d_model"]), ls=":", color="gray")
        axes[1][j].set_yscale("log")
        axes[1][j].set_xlabel("layer")
    axes[0][0].set_ylabel("mean ρ (writing)")
    axes[1][0].set_ylabel("SD of ρ")
    _integer_layers(fig)
    fig.tight_layout()
    return fig, {}


@figure("pk_fig7_quantiles", families=WITHIN, params=NULLS)
def pk_fig7_quantiles(data, fields, models, null_types):
    """**PK paper, Figure 7.** Per-layer median and 95th percentile of writing-space ρ against the same
    quantiles' 5-95 percentile range over each null's samples."""
    types = null_types
    plt = pyplot()
    ow = observed_within(data.get("pk", {}), fields)
    nw = null_groups(data.get("pk_null_within", {}), ("model", "layer", "kind"))
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.4), squeeze=False)
    for ax, m in zip(axes[0], models):
        ls = sorted(l for (mm, l, k) in ow if mm == m and k == "O")
        ax.plot(ls, [ow[(m, l, "O")]["median"] for l in ls], "ko", ms=3, label="median")
        ax.plot(ls, [ow[(m, l, "O")]["p95"] for l in ls], "k^", ms=3, label="p95")
        for i, null in enumerate(types):
            for q in ("median", "p95"):
                lo, hi = [], []
                for l in ls:
                    v = np.asarray(nw.get((m, l, "O", null), {}).get(q, []), float)
                    lo.append(np.percentile(v, 5) if v.size else np.nan)
                    hi.append(np.percentile(v, 95) if v.size else np.nan)
                ax.vlines(np.asarray(ls) + (0.15 if i else -0.15), lo, hi, color=f"C{i}", lw=2, alpha=0.6,
                          label=f"{null} 5–95%" if q == "median" else None)
        f = fields[m]
        ax.axhline(isotropic_rho(f["d_head"], f["d_model"]), ls=":", color="gray")
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("layer")
    axes[0][0].set_ylabel("ρ quantile (writing pairs)")
    axes[0][0].legend(fontsize=6)
    _integer_layers(fig)
    fig.tight_layout()
    return fig, {}


@figure("pk_fig8_reading_sd", families=WITHIN, params=NULLS)
def pk_fig8_reading_sd(data, fields, models, null_types):
    """**PK paper, Figure 8.** Dispersion of Q and K reading-space overlap per layer against the
    largest sample of each null that keeps the columns (column reassignment; of the null types {{
    snakemake.params.null_types|join(', ') }})."""
    plt = pyplot()
    ow = observed_within(data.get("pk", {}), fields)
    nw = null_groups(data.get("pk_null_within", {}), ("model", "layer", "kind"))
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.4), squeeze=False)
    for ax, m in zip(axes[0], models):
        for i, kind in enumerate(("Q", "K")):
            ls = sorted(l for (mm, l, k) in ow if mm == m and k == kind)
            if not ls:
                continue
            ax.plot(ls, [ow[(m, l, kind)]["sd"] for l in ls], "o-", ms=3, color=f"C{i}", label=f"{kind} observed")
            for t in (t for t in null_types if NULL_MODELS[t].keeps_columns):
                mx = [max(nw.get((m, l, kind, t), {}).get("sd", [np.nan])) for l in ls]
                ax.plot(ls, mx, "x--", ms=3, color=f"C{i}", label=f"{kind} max {NULL_MODELS[t].label}")
        ax.set_yscale("log")
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("layer")
    axes[0][0].set_ylabel("SD of ρ (reading pairs)")
    axes[0][0].legend(fontsize=6)
    _integer_layers(fig)
    fig.tight_layout()
    return fig, {}


@figure("pk_fig9_cross_heatmaps", families=CROSS, params=NULLS)
def pk_fig9_cross_heatmaps(data, fields, models, null_types):
    """**PK paper, Figure 9.** Writer layer × reader layer: log10 r and whether the mean ρ lies below (-1) or
    above (+1) every null sample, per reading kind."""
    return draw_fig9(conditions(data, fields, null_types), fields, models)


def draw_fig9(conds, fields, models):
    """Per model two rows of heatmaps (writer layer × reader layer, one column per reading kind):
    log10 r on a diverging scale centred at r = 1, and whether the mean ρ lies below / above every
    null sample (a three-colour legend)."""
    from matplotlib.colors import ListedColormap, TwoSlopeNorm
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    kinds = ("Q", "K", "V")
    cats = ListedColormap(["#3b6fb6", "#dddddd", "#c0392b"])
    fig, axes = plt.subplots(2 * len(models), 3, figsize=(10, 6.4 * len(models)), squeeze=False, layout="constrained")
    for i, m in enumerate(models):
        L = fields[m]["n_layers"]
        logs = []
        mats = []
        for kind in kinds:
            R = np.full((L, L), np.nan)
            S = np.full((L, L), np.nan)
            for c in conds:
                if c["model"] == m and c["scope"] == "cross" and c["kind"] == kind:
                    R[c["layer"], c["layer_r"]] = c["r"]
                    S[c["layer"], c["layer_r"]] = -1 if c["mean_below_all"] else (1 if c["mean_above_all"] else 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                lr = np.log10(R)
            logs.append(lr)
            mats.append(S)
        fin = np.concatenate([x[np.isfinite(x)] for x in logs]) if logs else np.array([])
        span = max(float(np.abs(fin).max()) if fin.size else 1.0, 1e-3)
        norm = TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span)
        for j, kind in enumerate(kinds):
            top, bot = axes[2 * i][j], axes[2 * i + 1][j]
            im = top.imshow(logs[j], origin="lower", cmap="RdBu_r", norm=norm)
            bot.imshow(mats[j], origin="lower", cmap=cats, vmin=-1.5, vmax=1.5, interpolation="nearest")
            top.set_title(f"writer O → reader {kind}", fontsize=8)
            bot.set_title(f"writer O → reader {kind}", fontsize=8)
            for a in (top, bot):
                a.set_xlabel("reader layer", fontsize=7)
                a.tick_params(labelsize=6)
                a.xaxis.set_major_locator(MaxNLocator(integer=True))
                a.yaxis.set_major_locator(MaxNLocator(integer=True))
            if j == 0:
                top.set_ylabel(f"{m}\nwriter layer", fontsize=8)
                bot.set_ylabel(f"{m}\nwriter layer", fontsize=8)
        cb = fig.colorbar(im, ax=list(axes[2 * i]), fraction=0.025, pad=0.02)
        cb.set_label("log10 r (r = SD / max null SD; 0: r = 1)", fontsize=7)
        cb.ax.tick_params(labelsize=6)
        axes[2 * i + 1][2].legend(
            handles=[Patch(color=cats(0), label="mean below every null sample"),
                     Patch(color=cats(1), label="neither"),
                     Patch(color=cats(2), label="mean above every null sample")],
            fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.suptitle("Writer → reader layer pairs: dispersion ratio r (rows 1, 3, …) and mean ρ against the nulls "
                 "(rows 2, 4, …)", fontsize=9)
    return fig, {}


def pick_layer(spec, n_layers: int, where: str = "figures.pk_rho_layer") -> int:
    """'middle' -> n_layers // 2; an int selects that layer (negative counts from the end, -1 the
    last). An index outside the model is a ConfigError naming ``where``, never clamped or wrapped."""
    from headgeom.core.errors import ConfigError

    if spec == "middle":
        return n_layers // 2
    layer = int(spec)
    if not -n_layers <= layer < n_layers:
        raise ConfigError(f"config: {where}: layer {layer} is outside the model "
                          f"(layers 0..{n_layers - 1}, or -{n_layers}..-1 from the end)")
    return layer % n_layers


@figure("pk_fig_rho_ccdf_layer", families=("pk",), params={"layer": "figures/pk_rho_layer", "kind": "figures/pk_rho_kind"})
def pk_fig_rho_ccdf_layer(pk: dict, fields: dict[str, dict], models: list[str], layer="middle", kind: str = "O"):
    """**PK paper.** CCDF of ρ over the {{ snakemake.params.kind }}-{{ snakemake.params.kind }} pairs of one
    layer per model (``figures.pk_rho_layer`` = {{ snakemake.params.layer }}); dotted at d/D."""
    cols, picks = pk, {m: pick_layer(layer, fields[m]["n_layers"]) for m in models}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, (m, layer) in enumerate(picks.items()):
        sel = (cols["model"] == m) & (cols["layer"] == layer) & (cols["kind"] == kind)
        c = f"C{i}"
        step_ccdf(ax, cols["rho"][sel], color=c, label=f"{m} layer {layer}")
        f = fields[m]
        ax.axvline(f["d_head"] / f["d_model"], color=c, ls=":", lw=1)
    ax.set_xlabel(f"ρ ({kind}-{kind} pairs)")
    ax.set_ylabel("fraction of pairs with ρ ≥ x")
    ax.set_title("ρ CCDF of one layer; dotted: isotropic d/D")
    ax.legend(fontsize=7)
    return fig, {"layers": picks}


# ------------------------------------------------------------------ per layer and layer pair

_F4, _F2 = "{:.4f}", "{:.2f}"


def _key_cols(scope):
    return ("model", "layer", "kind") if scope == "within" else ("model", "layer_w", "layer_r", "kind")


def _angle_cols(obs: float, ang: np.ndarray) -> dict:
    ang = ang[np.isfinite(ang)]
    if ang.size == 0:
        return {"min_angle_min": float("nan"), "min_angle_max": float("nan"), "angle_below_all": None,
                "angle_above_all": None}
    return {"min_angle_min": float(ang.min()), "min_angle_max": float(ang.max()),
            "angle_below_all": bool(obs < ang.min()), "angle_above_all": bool(obs > ang.max())}


@table("pk_sec5_3_null_samples", families=ALL4, params=NULLS)
def pk_sec5_3_null_samples(data, fields, models, null_types) -> Table:
    """**PK paper, §5.3 and Appendix F (the null samples).** One row per condition (a layer's within-layer
    pairs of one kind, or a writer → reader layer pair of one reading kind) and null model (null types:
    {{ snakemake.params.null_types|join(', ') }}): samples, the observed SD beside the smallest, mean
    and largest sample SD (whether it exceeds every sample) and its ratio to the mean sample SD, the
    observed mean ρ beside the samples' means, and the observed minimum angle beside the samples'
    minimum angles (whether it lies below / above every sample)."""
    # One row per condition (layer, or writer -> reader layer pair) and null model: the null
    # samples' SD, mean and minimum angle (smallest, mean, largest over samples) beside the
    # observed values.
    types = null_types
    rows = []
    for scope, fam, obs in (("within", "pk_null_within", observed_within(data.get("pk", {}), fields)),
                            ("cross", "pk_null_cross", observed_cross(data.get("pk_cross", {}), fields))):
        ng = null_groups(data.get(fam, {}), _key_cols(scope))
        for key, st in sorted(obs.items()):
            if key[0] not in models:
                continue
            m, layer = key[0], key[1]
            layer_r, kind = (None, key[2]) if scope == "within" else (key[2], key[3])
            for t in types:
                g = ng.get(tuple(key) + (t,))
                if not g:
                    continue
                sd, mean = np.asarray(g["sd"], float), np.asarray(g["mean"], float)
                ang = np.asarray(g["min_angle_deg"], float)
                rows.append({
                    "model": m, "scope": scope, "kind": kind, "layer": layer, "layer_r": layer_r, "null": t,
                    "n_samples": int(sd.size), "obs_sd": st["sd"], "sd_min": float(sd.min()),
                    "sd_mean": float(sd.mean()), "sd_max": float(sd.max()),
                    "sd_above_all": bool(st["sd"] > sd.max()),
                    "sd_over_null_mean_sd": st["sd"] / float(sd.mean()) if sd.mean() > 0 else float("inf"),
                    "obs_mean": st["mean"], "mean_min": float(mean.min()), "mean_mean": float(mean.mean()),
                    "mean_max": float(mean.max()), "obs_min_angle": st["min_angle_deg"],
                    **_angle_cols(st["min_angle_deg"], ang),
                })
    cols = [Column("model", "Model"), Column("scope", "Scope"), Column("kind", "Kind"), Column("layer", "Layer"),
            Column("layer_r", "Reader layer"), Column("null", "Null"), Column("n_samples", "Samples"),
            Column("obs_sd", "SD", _F4), Column("sd_min", "Null SD min", _F4), Column("sd_mean", "Null SD mean", _F4),
            Column("sd_max", "Null SD max", _F4), Column("sd_above_all", "SD above all"),
            Column("sd_over_null_mean_sd", "SD / null mean SD", _F2),
            Column("obs_mean", "Mean ρ", _F4), Column("mean_min", "Null mean min", _F4),
            Column("mean_mean", "Null mean mean", _F4), Column("mean_max", "Null mean max", _F4),
            Column("obs_min_angle", "Min angle (°)", _F2), Column("min_angle_min", "Null min angle min (°)", _F2),
            Column("min_angle_max", "Null min angle max (°)", _F2), Column("angle_below_all", "Angle below all"),
            Column("angle_above_all", "Angle above all")]
    return Table("pk_sec5_3_null_samples", "Per condition and null model: the null samples' SD, mean and minimum angle "
                 "(min, mean, max over samples) beside the observed values.", cols, rows)


def _rank_within(rows: list[dict], key: str, out: str, group: tuple, smallest_first: bool = False) -> None:
    """Set rows[i][out] to the rank of rows[i][key] among the rows sharing the ``group`` columns
    (1: the largest, or with ``smallest_first`` the smallest; a NaN value gets no rank, None); ties
    keep row order."""
    groups = defaultdict(list)
    for r in rows:
        groups[tuple(r[g] for g in group)].append(r)
    for members in groups.values():
        for r in members:
            r[out] = None
        sign = 1.0 if smallest_first else -1.0
        ranked = sorted((r for r in members if np.isfinite(r[key])), key=lambda r: sign * r[key])
        for k, r in enumerate(ranked, 1):
            r[out] = k


@table("pk_appendix_f_layer_stats", families=("pk", "pk_cross"))
def pk_appendix_f_layer_stats(data, fields, models) -> Table:
    """**PK paper, §5.2, Appendices F and G (per layer and layer pair).** One row per layer (within-layer pairs
    of each kind) and per writer → reader layer pair (per reading kind): pairs, mean and SD of ρ, mean ρ
    over the isotropic value d/D (whether below it, and by how many random-subspace SDs), SD over the
    random-subspace SD and its rank among the model's rows of that scope and kind (1: the largest),
    the mean and median over pairs of the pair minimum angle, the smallest pair minimum angle with its rank
    (1: the smallest) and whether it is among the lowest 10 % of the model's rows of that scope and kind
    (rounded up), within layers how many layers follow it, the largest ρ over its head pairs, and across
    layers the distance reader − writer and the mean, median and largest over head pairs of the weighted
    measure D‖RB‖²/(‖R‖²‖B‖²) (Table 9's max ρ and max weighted for every layer pair, not only its top ones)."""
    # One row per layer (within-layer pairs of each kind) and writer -> reader layer pair: mean ρ
    # over the isotropic value d/D, SD over the random-subspace SD, the mean over pairs of the
    # pair minimum angle, and (across layers) the layer distance and the mean and median of the
    # weighted measure over head pairs.
    rows = []
    pk, cross = data.get("pk", {}), data.get("pk_cross", {})
    for scope, src, cols_key in (("within", pk, ("model", "layer", "kind")),
                                 ("cross", cross, ("model", "layer", "layer_r", "kind"))):
        if not src:
            continue
        groups = defaultdict(list)
        for i, key in enumerate(zip(*(src[c] for c in cols_key))):
            groups[tuple(str(k) if isinstance(k, str) else int(k) for k in key)].append(i)
        for key, idx in sorted(groups.items()):
            m = key[0]
            if m not in models:
                continue
            idx = np.asarray(idx)
            f = fields[m]
            iso, iso_sd = isotropic_rho(f["d_head"], f["d_model"]), isotropic_sd(f["d_head"], f["d_model"])
            rho = np.asarray(src["rho"][idx], float)
            rho = rho[np.isfinite(rho)]
            ang = np.asarray(src["min_angle_deg"][idx], float)
            row = {"model": m, "scope": scope, "layer": key[1],
                   "layer_r": None if scope == "within" else key[2], "kind": key[-1],
                   "distance": None if scope == "within" else key[2] - key[1],
                   "n_pairs": int(rho.size), "mean": float(rho.mean()), "sd": float(rho.std(ddof=0)),
                   "mean_over_iso": float(rho.mean()) / iso, "below_iso": bool(rho.mean() < iso),
                   "sds_below_iso": (iso - float(rho.mean())) / iso_sd, "sd_over_random": float(rho.std(ddof=0)) / iso_sd,
                   "mean_min_angle": float(np.nanmean(ang)), "median_min_angle": float(np.nanmedian(ang)),
                   "min_angle": float(np.nanmin(ang)) if np.isfinite(ang).any() else float("nan"),
                   "max_rho": float(rho.max()) if rho.size else float("nan"),
                   "mean_weighted": None, "median_weighted": None, "max_weighted": None}
            if scope == "cross":
                w = np.asarray(src["weighted"][idx], float)
                row.update(mean_weighted=float(np.nanmean(w)), median_weighted=float(np.nanmedian(w)),
                           max_weighted=float(np.nanmax(w)))
            rows.append(row)
    _rank_within(rows, "sd", "sd_rank", ("model", "scope", "kind"))
    _rank_within(rows, "min_angle", "min_angle_rank", ("model", "scope", "kind"), smallest_first=True)
    last, ranked = defaultdict(int), Counter()  # each model's last layer; ranked rows per group
    for r in rows:
        if r["scope"] == "within":
            last[r["model"]] = max(last[r["model"]], r["layer"])
        ranked[(r["model"], r["scope"], r["kind"])] += r["min_angle_rank"] is not None
    for r in rows:
        n = ranked[(r["model"], r["scope"], r["kind"])]
        r["min_angle_low"] = None if r["min_angle_rank"] is None else r["min_angle_rank"] <= math.ceil(LOW_FRACTION * n)
        r["from_end"] = last[r["model"]] - r["layer"] if r["scope"] == "within" else None
    cols = [Column("model", "Model"), Column("scope", "Scope"), Column("kind", "Kind"), Column("layer", "Layer"),
            Column("layer_r", "Reader layer"), Column("distance", "Distance"), Column("n_pairs", "Pairs"),
            Column("mean", "Mean ρ", _F4), Column("sd", "SD", _F4), Column("mean_over_iso", "Mean / (d/D)", "{:.3f}"),
            Column("below_iso", "Mean < d/D"), Column("sds_below_iso", "(d/D − mean) / random SD", "{:.1f}"),
            Column("sd_over_random", "SD / random SD", _F2), Column("sd_rank", "SD rank"),
            Column("mean_min_angle", "Mean pair min angle (°)", _F2),
            Column("median_min_angle", "Median pair min angle (°)", _F2),
            Column("min_angle", "Min angle (°)", _F2), Column("min_angle_rank", "Min angle rank"),
            Column("min_angle_low", f"Min angle in the lowest {LOW_FRACTION:.0%}"),
            Column("from_end", "Layers after it"),
            Column("max_rho", "Max ρ", _F4),
            Column("mean_weighted", "Mean weighted", "{:.3f}"), Column("median_weighted", "Median weighted", "{:.3f}"),
            Column("max_weighted", "Max weighted", "{:.3f}")]
    return Table("pk_appendix_f_layer_stats", "Per layer and writer→reader layer pair: mean ρ / (d/D), SD / random-subspace SD, "
                 "mean pair minimum angle, and the weighted measure over head pairs.", cols, rows)


@table("pk_appendix_f_cross_distance", families=CROSS, params=NULLS)
def pk_appendix_f_cross_distance(data, fields, models, null_types) -> Table:
    """**PK paper, Appendix F (ρ by layer distance).** Per model, reading kind and distance Δ = reader − writer
    layer: layer pairs, the mean over them of their mean ρ (over d/D, whether below it, its distance from it), layer pairs with null
    samples, and those whose mean lies below / above every null sample, also as k/n, and whether every
    kind's mean lies within ±0.01 of d/D at this and every larger distance (null types: {{
    snakemake.params.null_types|join(', ') }})."""
    # One row per model, reading kind and layer distance Δ = reader − writer: layer pairs, the
    # mean over those pairs of their mean ρ (and over d/D), and how many pairs' mean lies below /
    # above every null sample.
    types = null_types
    oc = observed_cross(data.get("pk_cross", {}), fields)
    cmp = {(c["model"], c["kind"], c["layer"], c["layer_r"]): c
           for c in conditions(data, fields, types) if c["scope"] == "cross"}
    groups = defaultdict(list)
    for (m, lw, lr, k), st in oc.items():
        if m in models:
            groups[(m, k, lr - lw)].append((st["mean"], cmp.get((m, k, lw, lr), {})))
    rows = []
    for (m, k, dist), items in sorted(groups.items()):
        f = fields[m]
        means = np.array([x[0] for x in items], float)
        below = [c.get("mean_below_all") for _, c in items if c.get("mean_below_all") is not None]
        above = [c.get("mean_above_all") for _, c in items if c.get("mean_above_all") is not None]
        rows.append({"model": m, "kind": k, "distance": dist, "layer_pairs": len(items),
                     "mean_rho": float(means.mean()), "mean_over_iso": float(means.mean()) / isotropic_rho(f["d_head"], f["d_model"]),
                     "below_iso": bool(means.mean() < isotropic_rho(f["d_head"], f["d_model"])),
                     "abs_dev_iso": abs(float(means.mean()) - isotropic_rho(f["d_head"], f["d_model"])),
                     "with_nulls": len(below), "mean_below_all": int(sum(below)), "mean_above_all": int(sum(above)),
                     "below_frac": f"{int(sum(below))}/{len(below)}", "above_frac": f"{int(sum(above))}/{len(above)}"})
    # in_band_onward: at this distance and every larger one, every kind lies within ISO_BAND of d/D
    worst_from = defaultdict(float)  # (model, distance) -> largest |mean - d/D| from that distance on
    for r in rows:
        for g in range(1, r["distance"] + 1):
            worst_from[(r["model"], g)] = max(worst_from[(r["model"], g)], r["abs_dev_iso"])
    for r in rows:
        r["in_band_onward"] = bool(worst_from[(r["model"], r["distance"])] < ISO_BAND)
    cols = [Column("model", "Model"), Column("kind", "Kind"), Column("distance", "Distance"),
            Column("layer_pairs", "Layer pairs"), Column("mean_rho", "Mean ρ", _F4),
            Column("mean_over_iso", "Mean / (d/D)", "{:.3f}"), Column("below_iso", "Mean < d/D"),
            Column("abs_dev_iso", "|Mean − d/D|", _F4), Column("with_nulls", "Pairs with null samples"),
            Column("mean_below_all", "Mean below all"), Column("mean_above_all", "Mean above all"),
            Column("below_frac", "Below all / with nulls"), Column("above_frac", "Above all / with nulls"),
            Column("in_band_onward", "All kinds within ±0.01 of d/D from here on")]
    return Table("pk_appendix_f_cross_distance", "Writer→reader overlap grouped by layer distance.", cols, rows)


@table("pk_appendix_h_self_layers", families=("pk_self",))
def pk_appendix_h_self_layers(data, models) -> Table:
    """**PK paper, Appendix H (per layer).** Self-head overlap per layer and test (V reading vs writing, Q vs
    own group's K, Q vs writing): the observed mean over heads of ρ, the label-permutation mean, its p,
    permutations, whether they were exhaustive, and whether p is the smallest the test gives, 1/(n+1)."""
    # One row per model, layer and self-overlap test: the observed mean ρ, the permutation mean
    # and its p.
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
            Column("observed", "Observed", _F4), Column("null_mean", "Permutation mean", _F4),
            Column("p", "p", "{:.4f}"), Column("n_null", "Permutations"), Column("exact", "Exhaustive"),
            Column("at_min_p", "p = 1/(n+1)")]
    return Table("pk_appendix_h_self_layers", "Self-head overlap per layer against label permutations.", cols, rows)


# ------------------------------------------------------------------ §5.5 base vs instruct, pair by pair
# PK paper §5.5: base vs instruct, pair by pair (docs/methods.md §2.11).
#
# For every declared base/instruct pair (``models.<m>.pair``), the writing-space pairs (O-O,
# within a layer) of the two checkpoints are matched by (layer, head_i, head_j) and compared:
#   absolute difference  |Δρ| = |ρ_instruct − ρ_base|
#   relative difference  |Δρ| / ρ_base  (in %, relative to the base checkpoint's ρ)
# with their maxima (and where they occur) and medians, per layer and over all layers; and the
# check that the output-projection (o_proj) tensors themselves differ: per layer, the sha256 of
# the output-projection tensor recorded in the two pk shards' provenance (the tensor-store sha256
# of the stored array), so "ρ agrees although the weights changed" is read off one row.

# the output projection of every family (headgeom.architectures) and GGUF's attn_output
O_PROJ = re.compile("(" + "|".join(re.escape(n) for n in o_proj_names()) + r")\.weight$")


def o_proj_sha(provs: list[dict]) -> dict[tuple[str, int], str]:
    """(model, layer) -> sha256 of the layer's output-projection tensor, from pk shard provenance."""
    out = {}
    for p in provs:
        prov = p.get("provenance", p)
        shas = [sha for name, sha in (prov.get("tensors") or {}).items() if O_PROJ.search(name)]
        if shas:
            out[(str(prov["model"]), int(prov["layer"]))] = "+".join(sorted(shas))
    return out


def _pairs_of(pk: dict, model: str) -> dict[tuple[int, int, int], float]:
    if not pk:
        return {}
    sel = (pk["model"] == model) & (pk["kind"] == "O")
    return {(int(l), int(i), int(j)): float(r)
            for l, i, j, r in zip(pk["layer"][sel], pk["head_i"][sel], pk["head_j"][sel], pk["rho"][sel])}


def _summary(base, inst, layer, keys, a, b, sha, o_layers):
    d = np.abs(b - a)
    rel = np.where(a > 0, d / np.where(a > 0, a, 1.0), np.nan) * 100
    k = int(np.argmax(d))
    kr = int(np.nanargmax(rel)) if np.isfinite(rel).any() else k
    differ = sum(sha.get((base, l)) is not None and sha.get((inst, l)) is not None
                 and sha[(base, l)] != sha[(inst, l)] for l in o_layers)
    known = sum(sha.get((base, l)) is not None and sha.get((inst, l)) is not None for l in o_layers)
    where = lambda i: f"L{keys[i][0]} h{keys[i][1]}-h{keys[i][2]}"  # noqa: E731
    return {"base": base, "instruct": inst, "layer": layer, "pairs": int(d.size),
            "max_abs": float(d[k]), "max_abs_at": where(k), "max_rel": float(rel[kr]), "max_rel_at": where(kr),
            "median_abs": float(np.median(d)), "median_rel_pct": float(np.nanmedian(rel)),
            "o_proj_differ": f"{differ} / {known}" if known else "–"}


@table("pk_sec5_5_base_instruct_pairs", families=("pk",), derived=("pairs",))
def pk_sec5_5_base_instruct_pairs(data: dict, pairs: list[tuple[str, str]]) -> Table:
    """**PK paper, §5.5 (base vs instruct, per pair).** Every declared base/instruct pair (``pair:``):
    writing-space pairs matched by layer and heads; max and median of |Δρ| and of |Δρ|/ρ_base (with
    where the maxima occur) per layer and over all layers (row ``all``, with the range and median of the
    per-layer medians), and the layers whose output-projection tensors differ (sha256)."""
    # One row per declared pair and layer, then one row (layer "all") over every layer: the
    # row "all" also gives the range and median of the per-layer medians of |Δρ|.
    pairs = [tuple(x) for x in pairs]
    pk = data.get("pk", {})
    sha = o_proj_sha((data.get("_provs") or {}).get("pk", []))
    rows = []
    for base, inst in pairs:
        pb, pi = _pairs_of(pk, base), _pairs_of(pk, inst)
        keys = sorted(pb.keys() & pi.keys())
        if not keys:
            continue
        layers = sorted({k[0] for k in keys})
        per_layer_median = []
        for l in layers:
            kl = [k for k in keys if k[0] == l]
            a, b = np.array([pb[k] for k in kl]), np.array([pi[k] for k in kl])
            row = _summary(base, inst, l, kl, a, b, sha, [l])
            per_layer_median.append(row["median_abs"])
            rows.append(row | {"layer_median_range": "–", "median_layer_median": float("nan")})
        a, b = np.array([pb[k] for k in keys]), np.array([pi[k] for k in keys])
        med = np.asarray(per_layer_median)
        rows.append(_summary(base, inst, "all", keys, a, b, sha, layers)
                    | {"layer_median_range": f"{med.min():.2e} – {med.max():.2e}",
                       "median_layer_median": float(np.median(med))})
    notes = ("Writing-space pairs matched by (layer, head_i, head_j); |Δρ| = |ρ_instruct − ρ_base|, relative to "
             "ρ_base. o_proj differ: layers whose output-projection tensors have different sha256 / layers compared. "
             "ρ is invariant under a rotation of a head inside its own span, so equal ρ does not mean equal weights.")
    if not rows:
        notes = "No base/instruct pair (models with `pair:`, both running the PK stage) among the active models."
    return Table("pk_sec5_5_base_instruct_pairs", "Base vs instruct per writing-space pair: |Δρ|, relative Δρ, their maxima and medians, and whether o_proj differs.",
                 [Column("base", "Base"), Column("instruct", "Instruct"), Column("layer", "Layer"), Column("pairs", "Pairs"),
                  Column("max_abs", "Max |Δρ|", "{:.2e}"), Column("max_abs_at", "at"),
                  Column("max_rel", "Max relative |Δρ| (%)", "{:.3f}"), Column("max_rel_at", "at"),
                  Column("median_abs", "Median |Δρ|", "{:.2e}"), Column("median_rel_pct", "Median relative (%)", "{:.4f}"),
                  Column("layer_median_range", "Per-layer median |Δρ| (range)"),
                  Column("median_layer_median", "Median of per-layer medians", "{:.2e}"),
                  Column("o_proj_differ", "o_proj differ (layers)")], rows, notes=notes)


KINDS = ("Q", "K", "V")


def _spearman(a, b):
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return np.nan
    return float(spearmanr(a[ok], b[ok]).statistic)


def _pearson(a, b):
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return np.nan
    return float(np.corrcoef(a[ok], b[ok])[0, 1])


# ------------------------------------------------------------------ PK read paths


def layer_pair_groups(wl: np.ndarray, rl: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """(writer layer, reader layer, row indices) per layer pair, pairs in sorted order and each
    pair's rows in their order: what a mask (wl == a) & (rl == b) per pair selects, in one stable
    sort instead of a pass over every row per pair."""
    wl, rl = np.asarray(wl, np.int64), np.asarray(rl, np.int64)
    if not wl.size:
        return []
    key = (wl - wl.min()) * (int(rl.max() - rl.min()) + 1) + (rl - rl.min())
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    return [(int(wl[g[0]]), int(rl[g[0]]), g) for g in np.split(order, cuts)]


def model_kind_rows(rp: dict, models, kinds=KINDS):
    """(model, kind, boolean row mask) per model and kind, comparing the model column once per
    model (a read-path family can hold tens of millions of rows)."""
    for m in models:
        in_model = rp["model"] == m
        sub = np.flatnonzero(in_model)
        kind_sub = rp["kind"][sub]
        for kind in kinds:
            s = np.zeros(in_model.shape, bool)
            s[sub[kind_sub == kind]] = True
            yield m, kind, s


def read_paths_rows(rp: dict, models) -> list[dict]:
    rows = []
    for m, kind, s in model_kind_rows(rp, models):
        if not s.any():
            continue
        rho, share, lin = rp["rho"][s], rp["share"][s], rp["e_lin"][s]
        nrm, tot, cross = rp["e_norm"][s], rp["e_tot"][s], rp["e_cross"][s]
        ratio = share / rho
        per_pair = np.array([_spearman(share[t], rho[t])
                             for _, _, t in layer_pair_groups(rp["writer_layer"][s], rp["reader_layer"][s])])
        flags = sorted({str(f) for f in rp["flags"][s] if f}) if "flags" in rp else []
        unmeasured = bool(flags) and all(rp["flags"][s])  # no reader has a pre-attention norm
        rows.append({
            "model": m, "kind": kind, "pairs": int(s.sum()),
            "ratio_lin_tot_med": finite_quantile(rp["ratio_lin_tot"][s], 0.5), "ratio_lin_tot_p05": finite_quantile(rp["ratio_lin_tot"][s], 0.05),
            "ratio_lin_tot_p95": finite_quantile(rp["ratio_lin_tot"][s], 0.95), "rel_rms_med": finite_quantile(rp["rel_rms"][s], 0.5),
            "norm_over_lin_total": float(nrm.sum() / lin.sum()), "norm_over_lin_med": finite_quantile(nrm / lin, 0.5),
            "tot_over_lin_total": float(tot.sum() / lin.sum()), "cross_positive": int((cross > 0).sum()),
            "share_rho_spearman": _spearman(share, rho), "share_rho_pearson": _pearson(share, rho),
            "share_rho_ratio_med": finite_quantile(ratio, 0.5), "share_rho_ratio_p05": finite_quantile(ratio, 0.05),
            "share_rho_ratio_p95": finite_quantile(ratio, 0.95), "lin_rho_spearman": _spearman(lin, rho),
            "layer_pairs": int(len(per_pair)), "layer_pair_spearman_med": finite_quantile(per_pair, 0.5),
            "layer_pairs_negative": int((per_pair < 0).sum()),
            "composition_rho_spearman": _spearman(rp["composition"][s], rho),
            "composition_rho_pearson": _pearson(rp["composition"][s], rho),
            "flags": " ".join(flags),
        })
        if unmeasured:  # the normalization split is not measured (headgeom.methods.read_paths): nothing derived from it
            rows[-1].update({k: np.nan for k in NORM_SPLIT})
            rows[-1]["cross_positive"] = None
    return rows


#: table columns derived from the linear / normalization split of the read-path response
NORM_SPLIT = ("ratio_lin_tot_med", "ratio_lin_tot_p05", "ratio_lin_tot_p95", "rel_rms_med", "norm_over_lin_total",
              "norm_over_lin_med", "tot_over_lin_total")


@table("pk_sec5_4_read_paths", families=(RP,), **ACT)
def pk_sec5_4_read_paths(activation_read_paths: dict, models) -> Table:
    """**PK paper, §5.4 read paths on real text (activation stage).** Per model and reading kind (Q/K/V), over
    every writer head of layer l and reader head of a later layer: linear against normalization term of
    the first-order response (ratios, relative RMS error, cross-term signs), projected energy share
    tr(P_V C)/tr C of actual writes against ρ (Spearman, Pearson, share/ρ quantiles, per layer pair),
    linear-term energy against ρ, and composition scores against ρ. Models without a pre-attention norm
    (post-LN BERT) have the normalization columns NaN and a flag (not measured)."""
    rp = activation_read_paths
    rows = read_paths_rows(rp, models)
    f3, f2 = "{:.3f}", "{:.2f}"
    t = Table(
        "activation_read_paths",
        "PK paper §5.4 read paths on real text: linear vs normalization terms of the first-order response, "
        "projected energy share tr(P_V C)/tr C of actual writes against rho, composition scores",
        [Column("model", "Model"), Column("kind", "Kind"), Column("pairs", "Pairs"),
         Column("ratio_lin_tot_med", "lin/tot med", f3), Column("ratio_lin_tot_p05", "p05", f2),
         Column("ratio_lin_tot_p95", "p95", f2), Column("rel_rms_med", "rel. RMS med", f3),
         Column("norm_over_lin_total", "norm/lin (sum)", f3), Column("norm_over_lin_med", "norm/lin (pair med)", f3), Column("tot_over_lin_total", "tot/lin (sum)", f3),
         Column("cross_positive", "cross > 0"), Column("share_rho_spearman", "Spearman share-rho", f2),
         Column("share_rho_pearson", "Pearson", f2), Column("share_rho_ratio_med", "share/rho med", f2),
         Column("share_rho_ratio_p05", "p05", f2), Column("share_rho_ratio_p95", "p95", f2),
         Column("lin_rho_spearman", "Spearman lin-rho", f2), Column("layer_pair_spearman_med", "layer-pair med", f2),
         Column("layer_pairs_negative", "layer pairs < 0"), Column("composition_rho_spearman", "Spearman comp-rho", f2),
         Column("composition_rho_pearson", "Pearson comp-rho", f2), Column("flags", "Flags")],
        rows,
        notes="Energies are token means of squared norms; rel. RMS = sqrt(E||n||^2 / E||t||^2). "
              "Writes are taken where the model adds them to the residual, through a post-attention norm "
              "where the model has one (activation.read_paths.write_point: residual, the default; pre_norm: "
              "before that norm). Flag post_ln_read_path (post-LN models, e.g. BERT) / no_pre_norm_read_path "
              "(no norm before the reader's projections): the write reaches the reader through norms this "
              "first-order split does not model (post-LN: the LayerNorm after each residual add), so the "
              "linear / normalization columns (lin/tot, rel. RMS, norm/lin, tot/lin, cross > 0) are NaN, "
              "not measured; share, rho, linear energy and composition stay measured.",
    )
    return t


@figure("pk_fig4_share_vs_rho", families=(RP,), **ACT)
def pk_fig4_share_vs_rho(activation_read_paths: dict, models):
    """**PK paper, Figure 4.** Measured projected energy share of actual writes against ρ (hexbin, log counts;
    dashed: isotropic writes, share = ρ) per reading kind, and the distribution of share/ρ (median and
    5-95 percentile band)."""
    rp = activation_read_paths
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    plt = pyplot()
    n = max(len(models), 1)
    fig, axes = plt.subplots(2 * n, 3, figsize=(10, 5.2 * n), squeeze=False)
    index = {m: i for i, m in enumerate(models)}
    for m, kind, s in model_kind_rows(rp, models):
        i, k = index[m], KINDS.index(kind)
        ax, bx = axes[2 * i, k], axes[2 * i + 1, k]
        rho, share = rp["rho"][s], rp["share"][s]
        ok = np.isfinite(rho) & np.isfinite(share)
        if ok.sum():
            ax.hexbin(rho[ok], share[ok], gridsize=30, bins="log", mincnt=1, cmap="viridis")
            hi = float(max(rho[ok].max(), share[ok].max()))
            ax.plot([0, hi], [0, hi], "k--", lw=0.8)
            ratio = share[ok] / rho[ok]
            ratio = ratio[(ratio > 0) & np.isfinite(ratio)]
            if ratio.size:
                bins = np.logspace(np.log10(ratio.min()), np.log10(ratio.max()) + 1e-9, 40)
                bx.hist(ratio, bins=bins, color="C0")
                bx.set_xscale("log")
                # plain tick labels: log minor labels ("4×10⁻¹6×10⁻¹") ran into each other
                bx.xaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.5, 1, 2, 5, 10]))
                bx.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                bx.xaxis.set_minor_formatter(NullFormatter())
                p5, p50, p95 = np.quantile(ratio, [0.05, 0.5, 0.95])
                bx.axvspan(p5, p95, color="C1", alpha=0.2)
                bx.axvline(p50, color="C1")
                bx.axvline(1.0, color="k", ls="--", lw=0.8)
        ax.set_title(f"{m}: {kind} ({int(s.sum())} pairs)", fontsize=9)
        ax.set_xlabel("ρ")
        ax.set_ylabel("tr(P_V C)/tr C")
        bx.set_xlabel("share / ρ")
    fig.suptitle("Figure 4: measured projected energy share vs ρ (hexbin, log counts; dashed: isotropic writes)")
    fig.tight_layout()
    return fig


#: most points a scatter panel draws (beyond it, an even stride through the points)
SCATTER_MAX = 200_000


@figure("pk_fig5_spearman_layer_pairs", families=(RP,), **ACT)
def pk_fig5_spearman_layer_pairs(activation_read_paths: dict, models):
    """**PK paper, Figure 5.** Spearman correlation of share with ρ per writer → reader layer pair, per reading
    kind; V linear-term energy against ρ (at most 200,000 points drawn, an even stride beyond)."""
    rp = activation_read_paths
    plt = pyplot()
    n = max(len(models), 1)
    fig, axes = plt.subplots(n, 2, figsize=(9, 3.4 * n), squeeze=False)
    for i, m in enumerate(models):
        ax, bx = axes[i]
        masks = {kind: s for _, kind, s in model_kind_rows(rp, [m])}
        for k, kind in enumerate(KINDS):
            s = masks[kind]
            share, rho = rp["share"][s], rp["rho"][s]
            vals = [_spearman(share[t], rho[t]) for _, _, t in layer_pair_groups(rp["writer_layer"][s], rp["reader_layer"][s])]
            vals = np.array([v for v in vals if np.isfinite(v)])
            if vals.size:
                ax.scatter(np.full(vals.size, k) + np.linspace(-0.25, 0.25, vals.size), vals, s=6, alpha=0.6)
                ax.hlines(np.median(vals), k - 0.35, k + 0.35, color="k")
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_xticks(range(3), KINDS)
        ax.set_ylabel("Spearman(share, ρ) per layer pair")
        ax.set_title(m, fontsize=9)
        s = masks["V"]
        if s.any():
            # every pair up to SCATTER_MAX points, else an even stride through them (the title's
            # Spearman is over all of them)
            shown = np.flatnonzero(s)[::max(1, -(-int(s.sum()) // SCATTER_MAX))]
            bx.scatter(rp["rho"][shown], rp["e_lin"][shown], s=3, alpha=0.4, rasterized=True)
            bx.set_yscale("log")
            bx.set_title(f"V: Spearman(linear energy, ρ) = {_spearman(rp['e_lin'][s], rp['rho'][s]):.2f}", fontsize=9)
        bx.set_xlabel("ρ")
        bx.set_ylabel("E||linear term||²")
    fig.suptitle("Figure 5: per-layer-pair Spearman of share with ρ; V linear-term energy vs ρ")
    fig.tight_layout()
    return fig
