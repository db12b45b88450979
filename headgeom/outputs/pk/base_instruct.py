"""The PK paper's base against instruct checkpoints (models with ``pair:``): Appendix E per layer
and §5.5 pair by pair (docs/methods.md §2.11).

For every declared base/instruct pair (``models.<m>.pair``), the writing-space pairs (O-O, within a
layer) of the two checkpoints are matched by (layer, head_i, head_j) and compared:
  absolute difference  |Δρ| = |ρ_instruct − ρ_base|
  relative difference  |Δρ| / ρ_base  (in %, relative to the base checkpoint's ρ)
with their maxima (and where they occur) and medians, per layer and over all layers; and the check
that the output-projection (o_proj) tensors themselves differ: per layer, the sha256 of the
output-projection tensor recorded in the two pk_within shards' provenance (the tensor-store sha256 of the
stored array), so "ρ agrees although the weights changed" is read off one row."""

from __future__ import annotations

import re

import numpy as np

from headgeom.architectures import o_proj_names
from headgeom.core.stats import agreeing_decimals
from headgeom.methods.pk_conditions import matched_differences, observed_within
from headgeom.outputs.formats import Column, Table
from headgeom.outputs.pk.common import table


@table("pk_appendix_e_base_instruct", families=("pk_within",), derived=("pairs",))
def pk_appendix_e_base_instruct(data, fields, pairs: list[tuple[str, str]]) -> Table:
    """**PK paper, Appendix E (base vs instruct).** Base against instruct (models with ``pair:``): absolute
    per-layer differences of writing-space mean ρ, SD and minimum angle, and the decimal places to which
    the layers' mean ρ and SD agree."""
    pairs = [tuple(x) for x in pairs]
    ow = observed_within(data.get("pk_within", {}), fields)
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
    return Table(columns=[Column("base", "Base"), Column("instruct", "Instruct"), Column("layers", "Layers"),
                          Column("median_abs_mean", "Median |Δ mean ρ|", "{:.2e}"), Column("max_abs_mean", "Max |Δ mean ρ|", "{:.2e}"),
                          Column("median_abs_sd", "Median |Δ SD|", "{:.2e}"), Column("median_abs_angle", "Median |Δ min angle| (°)", "{:.3f}"),
                          Column("digits", "Decimals agreeing (layers)")],
                          rows=rows, notes=("Decimals agreeing: per layer, the most decimal places to which base and instruct round "
                                            "both mean ρ and SD alike (at most 10), range over layers." if rows else
                                            "No base/instruct pair (models with `pair:`) among the active models."))


# the output projection of every architecture (headgeom.architectures) and GGUF's attn_output
O_PROJ = re.compile("(" + "|".join(re.escape(n) for n in o_proj_names()) + r")\.weight$")


def o_proj_sha(provs: list[dict]) -> dict[tuple[str, int], str]:
    """(model, layer) -> sha256 of the layer's output-projection tensor, from pk_within shard provenance."""
    out = {}
    for p in provs:
        prov = p.get("provenance", p)
        shas = [sha for name, sha in (prov.get("tensors") or {}).items() if O_PROJ.search(name)]
        if shas:
            out[(str(prov["model"]), int(prov["layer"]))] = "+".join(sorted(shas))
    return out


def _pairs_of(pk: dict, model: str) -> dict[tuple[int, int, int], float]:
    """(layer, head_i, head_j) -> ρ of a model's writing-space pairs."""
    if not pk:
        return {}
    sel = (pk["model"] == model) & (pk["kind"] == "O")
    return {(int(l), int(i), int(j)): float(r)
            for l, i, j, r in zip(pk["layer"][sel], pk["head_i"][sel], pk["head_j"][sel], pk["rho"][sel])}


def _summary(base, inst, layer, keys, a, b, sha, o_layers):
    """One row of §5.5: the matched pairs ``keys`` (ρ_base ``a``, ρ_instruct ``b``) of one layer or of
    all, and how many of the layers ``o_layers`` have output projections that differ."""
    d, rel = matched_differences(a, b)
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


@table("pk_sec5_5_base_instruct_pairs", families=("pk_within",), derived=("pairs",))
def pk_sec5_5_base_instruct_pairs(data: dict, pairs: list[tuple[str, str]]) -> Table:
    """**PK paper, §5.5 (base vs instruct, per pair).** Every declared base/instruct pair (``pair:``):
    writing-space pairs matched by layer and heads; max and median of |Δρ| and of |Δρ|/ρ_base (with
    where the maxima occur) per layer and over all layers (row ``all``, with the range and median of the
    per-layer medians), and the layers whose output-projection tensors differ (sha256)."""
    pairs = [tuple(x) for x in pairs]
    pk = data.get("pk_within", {})
    sha = o_proj_sha((data.get("_provs") or {}).get("pk_within", []))
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
    return Table(columns=[Column("base", "Base"), Column("instruct", "Instruct"), Column("layer", "Layer"), Column("pairs", "Pairs"),
                          Column("max_abs", "Max |Δρ|", "{:.2e}"), Column("max_abs_at", "at"),
                          Column("max_rel", "Max relative |Δρ| (%)", "{:.3f}"), Column("max_rel_at", "at"),
                          Column("median_abs", "Median |Δρ|", "{:.2e}"), Column("median_rel_pct", "Median relative (%)", "{:.4f}"),
                          Column("layer_median_range", "Per-layer median |Δρ| (range)"),
                          Column("median_layer_median", "Median of per-layer medians", "{:.2e}"),
                          Column("o_proj_differ", "o_proj differ (layers)")], rows=rows, notes=notes)
