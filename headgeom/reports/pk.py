"""PK paper: aggregation of pair and null shards into Tables 1-9 and Figures 2, 3, 6-9."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from headgeom.core.seeds import rng_for
from headgeom.core.stats import empirical_p
from headgeom.methods.nulls import NULL_MODELS
from headgeom.methods.pk import isotropic_rho, isotropic_sd, layer_stats
from headgeom.reports.figures import pyplot
from headgeom.reports.tables import Column, Table

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


def table1(data, fields, models) -> Table:
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
            rows.append({"model": m, "comparison": _label(scope, kind), "pairs": int(sel.sum()),
                         "min_angle": float(np.nanmin(ang)), "median_angle": float(np.nanmedian(ang)),
                         "under_1deg": int(np.sum(ang < 1.0))})
    return Table("pk_t1_min_angles", "Minimum principal angle over head-subspace pairs within and across layers.",
                 [Column("model", "Model"), Column("comparison", "Comparison"), Column("pairs", "Pairs"),
                  Column("min_angle", "Min angle (°)", "{:.2f}"), Column("median_angle", "Median pair angle (°)", "{:.1f}"),
                  Column("under_1deg", "Pairs < 1°")], rows)


def table2(data, fields, models) -> Table:
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
    return Table("pk_t2_lower_bound", "Lower bound max_i ρ(R, U_i) ≥ λ_min(S)/H with reading spaces fixed, and the observed minimum over readers.",
                 [Column("model", "Model"), Column("lambda_min", "λ_min(S) min", "{:.2e}"), Column("lambda_max", "λ_min(S) max", "{:.2e}"),
                  Column("layer_pairs", "Layer pairs"),
                  Column("min_Q", "min max ρ Q", "{:.3f}"), Column("min_K", "K", "{:.3f}"), Column("min_V", "V", "{:.3f}"),
                  Column("below_iso_Q", "Below d/D Q"), Column("below_iso_K", "K"), Column("below_iso_V", "V"),
                  Column("bound_violations", "Bound violations")], rows,
                 notes="Bound violations counts layer pairs and kinds where the proposition's bound fails numerically (expected 0).")


def table3(data, fields, models) -> Table:
    rows = []
    for m in models:
        f = fields[m]
        H = f["n_heads"]
        rows.append({"model": m, "D": f["d_model"], "d": f["d_head"], "heads": f"{H} / {f['n_kv_heads']}",
                     "layers": f["n_layers"], "writer_pairs": H * (H - 1) // 2,
                     "iso": isotropic_rho(f["d_head"], f["d_model"]), "random_sd": isotropic_sd(f["d_head"], f["d_model"])})
    return Table("pk_t3_models", "Models and isotropic values.",
                 [Column("model", "Model"), Column("D", "D"), Column("d", "d"), Column("heads", "Heads (q / kv)"),
                  Column("layers", "Layers"), Column("writer_pairs", "Writer pairs per layer"),
                  Column("iso", "Isotropic d/D", "{:.4f}"), Column("random_sd", "Random SD", "{:.4f}")], rows)


def table4(conds, models, types) -> Table:
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
    return Table("pk_t4_null_summary", "Dispersion against both null models: conditions whose SD exceeds every null sample, r = SD / max null SD.",
                 [Column("model", "Model"), Column("comparison", "Comparison"), Column("conditions", "Conditions"),
                  Column("samples", "Samples per null"), Column("exceeds_all", "Exceeds all"),
                  Column("median_r", "Median r", "{:.2f}"),
                  *(Column(f"median_ratio_{t}", f"Median SD / {NULL_MODELS[t].label} mean", "{:.1f}") for t in types)],
                 rows)


def table6(conds, models) -> Table:
    rows = []
    for c in conds:
        if c["scope"] == "within" and c["kind"] == "O" and c["model"] in models:
            null_min = c.get("null_min_angle_reassign", float("nan"))  # this table is about reassignment
            if not (c["obs_min_angle"] < null_min):
                rows.append({"model": c["model"], "layer": c["layer"], "obs_min_angle": c["obs_min_angle"],
                             "null_min": null_min, "samples": (c.get("n_samples") or {}).get("reassign", "–")})
    return Table("pk_t6_min_angle_vs_reassign", "Layers whose observed minimum writing-space angle is not below every column-reassignment sample.",
                 [Column("model", "Model"), Column("layer", "Layer"), Column("obs_min_angle", "Observed min angle (°)", "{:.3f}"),
                  Column("null_min", "Min over reassignment samples (°)", "{:.3f}"),
                  Column("samples", "Reassignment samples")], rows)


def table7(data, conds, fields, models) -> Table:
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
    return Table("pk_t7_reading_within", "Overlap between same-kind reading spaces within a layer, against the null models.",
                 [Column("model", "Model"), Column("kind", "Reading"), Column("pairs", "Pairs per layer"),
                  Column("mean_range", "Mean ρ (layer range)"), Column("mean_below_all", "Layers mean below all nulls"),
                  Column("sd_range", "SD (range)"), Column("sd_above_all", "Layers SD above all nulls"),
                  Column("samples", "Samples per null"), Column("min_angle", "Min angle (°)", "{:.2f}")], rows)


def table8(conds, models) -> Table:
    rows = []
    for m in models:
        for kind in ("Q", "K", "V"):
            cs = [c for c in conds if c["model"] == m and c["scope"] == "cross" and c["kind"] == kind]
            if not cs:
                continue
            rows.append({"model": m, "kind": kind, "layer_pairs": len(cs),
                         "exceeds_all": int(sum(bool(c["exceeds_all"]) for c in cs)),
                         "median_ratio_rotation": float(np.median([c.get("ratio_mean_sd_rotation", np.nan) for c in cs])),
                         "mean_below_all": int(sum(bool(c["mean_below_all"]) for c in cs)),
                         "mean_above_all": int(sum(bool(c["mean_above_all"]) for c in cs)),
                         "samples": samples_text(cs)})
    return Table("pk_t8_cross_nulls", "Dispersion of writer-reader overlap across layers against the null models.",
                 [Column("model", "Model"), Column("kind", "Reading"), Column("layer_pairs", "Layer pairs"),
                  Column("exceeds_all", "SD exceeds all nulls"), Column("median_ratio_rotation", "Median SD / rotation mean", "{:.1f}"),
                  Column("mean_below_all", "Mean below all"), Column("mean_above_all", "Mean above all"),
                  Column("samples", "Samples per null")], rows)


def table9(data, fields, models, top: int = 3) -> Table:
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
    return Table("pk_t9_weighted", "Largest ρ and largest spectral-weighted measure D‖RB‖²/(‖R‖²‖B‖²) per layer pair (top by each).",
                 [Column("model", "Model"), Column("pair", "Layer pair, reading"), Column("max_rho", "Max ρ", "{:.3f}"),
                  Column("max_weighted", "Max weighted", "{:.2f}"), Column("mean_weighted", "Mean weighted", "{:.2f}")], rows)


def table_self(data, models) -> Table:
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
    return Table("pk_self_overlap", "Self-head overlap: mean_h ρ between a head's spaces against label permutations (GQA: all group labellings).",
                 [Column("model", "Model"), Column("test", "Test"), Column("layers", "Layers"), Column("observed", "Observed (range)"),
                  Column("null_mean", "Permutation mean (range)"), Column("p_max", "Max p", "{:.4f}"),
                  Column("n_null", "Permutations"), Column("exact", "Exhaustive")], rows,
                 notes="V_vs_O: each head's writing space vs its own (group's) V reading space; Q_vs_K: Q vs own group's K; Q_vs_O: Q vs own writing space. Undefined with one KV group.")


def table_base_instruct(data, fields, pairs: list[tuple[str, str]]) -> Table:
    ow = observed_within(data.get("pk", {}), fields)
    rows = []
    for base, inst in pairs:
        layers = sorted({l for (m, l, k) in ow if m == base and k == "O"} & {l for (m, l, k) in ow if m == inst and k == "O"})
        diffs = []
        for l in layers:
            a, b = ow[(base, l, "O")], ow[(inst, l, "O")]
            diffs.append([abs(a[s] - b[s]) for s in ("mean", "sd", "min_angle_deg")])
        d = np.asarray(diffs) if diffs else np.full((1, 3), np.nan)
        rows.append({"base": base, "instruct": inst, "layers": len(layers),
                     "median_abs_mean": float(np.median(d[:, 0])), "max_abs_mean": float(np.max(d[:, 0])),
                     "median_abs_sd": float(np.median(d[:, 1])), "median_abs_angle": float(np.median(d[:, 2]))})
    return Table("pk_base_instruct", "Base vs instruct: absolute per-layer differences of writing-space statistics.",
                 [Column("base", "Base"), Column("instruct", "Instruct"), Column("layers", "Layers"),
                  Column("median_abs_mean", "Median |Δ mean ρ|", "{:.2e}"), Column("max_abs_mean", "Max |Δ mean ρ|", "{:.2e}"),
                  Column("median_abs_sd", "Median |Δ SD|", "{:.2e}"), Column("median_abs_angle", "Median |Δ min angle| (°)", "{:.3f}")],
                 rows, notes="" if rows else "No base/instruct pair (models with `pair:`) among the active models.")


def table_ranks(provs_pk: list[dict], models) -> Table:
    """Numerical ranks of head spaces and the direct-sum defect, from the pk shards' provenance."""
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
    return Table("pk_ranks", "Numerical ranks (relative tolerance rank_rtol) and direct-sum defect Σ rank − rank of the sum vs the forced max(0, H d − D).",
                 [Column("model", "Model"), Column("kind", "Space"), Column("rank_min", "Head rank min"), Column("rank_max", "max"),
                  Column("layer_rank", "Rank of the sum (layers)"), Column("defect_max", "Max defect"),
                  Column("expected", "Forced defect"), Column("layers_excess", "Layers above forced"),
                  Column("folded", "Folded into reading spaces")], rows)


def table_conditions(data, conds, fields, models, types) -> Table:
    """Every layer (within) and layer pair (across): statistics and null comparison."""
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
    return Table("pk_conditions", "Per layer (within) and per writer→reader layer pair (across): ρ statistics and the null comparison; p = (k+1)/(n+1) for the SD.", cols, rows)


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


def fig2(data, fields, models, types, random_samples: int = 30):
    from headgeom.reports.figures import step_ccdf

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


def table_fig2(data, fields, models, types, reference_draws: int = 100) -> Table:
    """Figure 2's cited counts (PK §5.3): for the Figure 2 layer of each model, the observed
    median / p95 / max and the pairs below every value / above every value of each null (all its
    samples pooled); over all layers with null samples, the layers whose median lies below every
    null sample's median and whose p95 lies above every null sample's p95; and the sampled
    random-subspace reference (mean ± SD of ρ over ``reference_draws`` random pairs) beside the
    analytic one."""
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


MAX_LABELLED = 3  # Figure 3 labels the points below r = 1 of a column when it has at most this many


def fig3(conds, models):
    """r per condition, one column per (model, comparison). Conditions whose null sample count
    differs from the most common one get their own panel (r = SD / max null SD depends on n; PK
    Figure 3 shows Qwen3-235B layer 46, n = 3, apart); points below r = 1 are triangles labelled
    with their condition and r."""
    from collections import Counter

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


def fig6(data, fields, models):
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


def fig7(data, fields, models, types):
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


def fig8(data, fields, models):
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
            mx = [max(nw.get((m, l, kind, "reassign"), {}).get("sd", [np.nan])) for l in ls]
            ax.plot(ls, mx, "x--", ms=3, color=f"C{i}", label=f"{kind} max reassignment")
        ax.set_yscale("log")
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("layer")
    axes[0][0].set_ylabel("SD of ρ (reading pairs)")
    axes[0][0].legend(fontsize=6)
    _integer_layers(fig)
    fig.tight_layout()
    return fig, {}


def fig9(conds, fields, models):
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
