"""Output builders of the activation stage (entries of headgeom.reports.outputs): each takes the
concatenated shard columns + params and returns its Table or matplotlib figure; the registry
writes them with provenance.

  natural_return_table / natural_return_figure   paper 1's natural-return paragraph
  read_paths_table                               the PK paper's §5.4 numbers
  read_paths_fig4                                Figure 4: hexbin share vs rho; share/rho ratio
  read_paths_fig5                                Figure 5: per-layer-pair Spearman; V linear energy vs rho
"""

from __future__ import annotations

import numpy as np

from ..reports.figures import pyplot as _plt
from ..reports.tables import Column, Table
from .natural_return import population

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


def _q(x, q):
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    return float(np.quantile(x, q)) if x.size else np.nan


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
            "align_high": _q(A[ih], 0.5), "align_wrong_v": _q(Aw[ih], 0.5), "align_low": _q(A[il], 0.5),
            "layers_both_positive": both, "g_y_high": _q(g[ih], 0.5), "g_y_low": _q(g[il], 0.5),
            "wrong_v_defined": bool(np.isfinite(Aw[ih]).any()) if len(ih) else False,
        })
        pops[m] = {"high": A[ih], "wrong_v": Aw[ih], "low": A[il]}
    return rows, pops


def natural_return_table(nat: dict, clo: dict, models, params: dict) -> Table:
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
        aggregation="headgeom.activation.report.natural_return_table",
    )
    return t


def natural_return_figure(nat: dict, clo: dict, models, params: dict):
    _, pops = natural_return_rows(nat, clo, models, params.get("high_quantile", 0.9), params.get("low_quantile", 0.5))
    plt = _plt()
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


# ------------------------------------------------------------------ PK read paths


def read_paths_rows(rp: dict, models) -> list[dict]:
    rows = []
    for m in models:
        for kind in KINDS:
            s = (rp["model"] == m) & (rp["kind"] == kind)
            if not s.any():
                continue
            rho, share, lin = rp["rho"][s], rp["share"][s], rp["e_lin"][s]
            nrm, tot, cross = rp["e_norm"][s], rp["e_tot"][s], rp["e_cross"][s]
            ratio = share / rho
            wl, rl = rp["writer_layer"][s], rp["reader_layer"][s]
            per_pair = []
            for a, b in sorted(set(zip(wl.tolist(), rl.tolist()))):
                t = (wl == a) & (rl == b)
                per_pair.append(_spearman(share[t], rho[t]))
            per_pair = np.array(per_pair)
            flags = sorted({str(f) for f in rp["flags"][s] if f}) if "flags" in rp else []
            unmeasured = bool(flags) and all(rp["flags"][s])  # no reader has a pre-attention norm
            rows.append({
                "model": m, "kind": kind, "pairs": int(s.sum()),
                "ratio_lin_tot_med": _q(rp["ratio_lin_tot"][s], 0.5), "ratio_lin_tot_p05": _q(rp["ratio_lin_tot"][s], 0.05),
                "ratio_lin_tot_p95": _q(rp["ratio_lin_tot"][s], 0.95), "rel_rms_med": _q(rp["rel_rms"][s], 0.5),
                "norm_over_lin_total": float(nrm.sum() / lin.sum()), "norm_over_lin_med": _q(nrm / lin, 0.5),
                "tot_over_lin_total": float(tot.sum() / lin.sum()), "cross_positive": int((cross > 0).sum()),
                "share_rho_spearman": _spearman(share, rho), "share_rho_pearson": _pearson(share, rho),
                "share_rho_ratio_med": _q(ratio, 0.5), "share_rho_ratio_p05": _q(ratio, 0.05),
                "share_rho_ratio_p95": _q(ratio, 0.95), "lin_rho_spearman": _spearman(lin, rho),
                "layer_pairs": int(len(per_pair)), "layer_pair_spearman_med": _q(per_pair, 0.5),
                "layer_pairs_negative": int((per_pair < 0).sum()),
                "composition_rho_spearman": _spearman(rp["composition"][s], rho),
                "composition_rho_pearson": _pearson(rp["composition"][s], rho),
                "flags": " ".join(flags),
            })
            if unmeasured:  # the normalization split is not measured (read_paths.py): nothing derived from it
                rows[-1].update({k: np.nan for k in NORM_SPLIT})
                rows[-1]["cross_positive"] = None
    return rows


#: table columns derived from the linear / normalization split of the read-path response
NORM_SPLIT = ("ratio_lin_tot_med", "ratio_lin_tot_p05", "ratio_lin_tot_p95", "rel_rms_med", "norm_over_lin_total",
              "norm_over_lin_med", "tot_over_lin_total")


def read_paths_table(rp: dict, models, params: dict) -> Table:
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
        aggregation="headgeom.activation.report.read_paths_table",
    )
    return t


def read_paths_fig4(rp: dict, models, params: dict):
    plt = _plt()
    n = max(len(models), 1)
    fig, axes = plt.subplots(2 * n, 3, figsize=(10, 5.2 * n), squeeze=False)
    for i, m in enumerate(models):
        for k, kind in enumerate(KINDS):
            s = (rp["model"] == m) & (rp["kind"] == kind)
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
                    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
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


def read_paths_fig5(rp: dict, models, params: dict):
    plt = _plt()
    n = max(len(models), 1)
    fig, axes = plt.subplots(n, 2, figsize=(9, 3.4 * n), squeeze=False)
    for i, m in enumerate(models):
        ax, bx = axes[i]
        for k, kind in enumerate(KINDS):
            s = (rp["model"] == m) & (rp["kind"] == kind)
            wl, rl = rp["writer_layer"][s], rp["reader_layer"][s]
            vals = [_spearman(rp["share"][s][(wl == a) & (rl == b)], rp["rho"][s][(wl == a) & (rl == b)])
                    for a, b in sorted(set(zip(wl.tolist(), rl.tolist())))]
            vals = np.array([v for v in vals if np.isfinite(v)])
            if vals.size:
                ax.scatter(np.full(vals.size, k) + np.linspace(-0.25, 0.25, vals.size), vals, s=6, alpha=0.6)
                ax.hlines(np.median(vals), k - 0.35, k + 0.35, color="k")
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_xticks(range(3), KINDS)
        ax.set_ylabel("Spearman(share, ρ) per layer pair")
        ax.set_title(m, fontsize=9)
        s = (rp["model"] == m) & (rp["kind"] == "V")
        if s.any():
            bx.scatter(rp["rho"][s], rp["e_lin"][s], s=3, alpha=0.4)
            bx.set_yscale("log")
            bx.set_title(f"V: Spearman(linear energy, ρ) = {_spearman(rp['e_lin'][s], rp['rho'][s]):.2f}", fontsize=9)
        bx.set_xlabel("ρ")
        bx.set_ylabel("E||linear term||²")
    fig.suptitle("Figure 5: per-layer-pair Spearman of share with ρ; V linear-term energy vs ρ")
    fig.tight_layout()
    return fig
