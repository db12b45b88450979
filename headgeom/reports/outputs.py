"""The output registry: every table and figure the pipeline makes.

Each entry says what the output is (name, kind, paper), which shard families it reads (see
headgeom.jobs.families), which config keys it takes as params, the function that builds it and
its caption. From this one list come: the ``table_*`` / ``figure_*`` rules (one loop in
workflow/rules/outputs.smk, all local), the one script that builds any of them
(workflow/scripts/output.py -> ``build_output``), the ``snakemake --report`` captions
(workflow/report/captions/, written by ``headgeom docs``), ``headgeom audit`` (how to rebuild
a table from its shards) and docs/outputs.md.

A builder is ``build(data, fields, models, params)``: ``data[family]`` holds the concatenated
columns of that family's shards (``data["_provs"][family]`` their provenance records),
``fields`` each model's architecture fields, ``models`` the active models, ``params`` the
output's config values. A table builder returns a ``Table``; a figure builder a matplotlib
figure, or ``(figure, extra provenance)``.

Adding a table or figure: one builder function + one ``Output`` entry here (caption
included), then ``headgeom docs`` (README, "Recipes").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

KINDS = ("table", "figure")


@dataclass(frozen=True)
class Output:
    name: str
    kind: str  # table | figure
    paper: str  # report category: "Paper 1" | "PK paper"
    families: tuple  # shard families read
    build: Callable  # build(data, fields, models, params) -> Table | figure | (figure, dict)
    caption: str = ""  # reST (Jinja: snakemake.params); default: CAPTIONS[(kind, name)]
    params: dict = field(default_factory=dict)  # param name -> config dpath
    derived: tuple = ()  # params the rule file computes: "pairs" (declared base/instruct pairs)
    shard_models: str = "active"  # whose shards: "active", "lineages" (paper1.lineages' checkpoints) or
    #   "activation" (the models the activation stage runs for: activation.enabled / activation.models)
    builder_models: str = "active"  # the models the builder gets (same choices); an output whose
    #   shard_models list is empty (activation stage off) is not a target of `all`

    def paths(self) -> dict[str, str]:
        if self.kind == "table":
            return {ext: f"results/tables/{self.name}.{ext}" for ext in ("csv", "md", "tex", "html")} | {
                "prov": f"results/tables/{self.name}.prov.json"}
        return {ext: f"figures/{self.name}.{ext}" for ext in ("png", "pdf")} | {"prov": f"figures/{self.name}.prov.json"}

    @property
    def main(self) -> str:
        """The file `snakemake --report` shows (the table's HTML rendering / the PNG)."""
        return self.paths()["html" if self.kind == "table" else "png"]


# ------------------------------------------------------------------ builders


def _pk():
    from headgeom.reports import pk

    return pk


def _pkl():
    from headgeom.reports import pk_layers

    return pk_layers


def _p1():
    from headgeom.reports import paper1

    return paper1


def _bi():
    from headgeom.reports import base_instruct

    return base_instruct


def _tables():
    from headgeom.reports import tables

    return tables


def _figs():
    from headgeom.reports import figures

    return figures


def _conds(d, f, p):
    return _pk().conditions(d, f, tuple(p["null_types"]))


def pick_layer(spec, n_layers: int) -> int:
    """'middle' -> n_layers // 2; an int selects that layer (negative counts from the end)."""
    if spec == "middle":
        return n_layers // 2
    layer = int(spec)
    return layer % n_layers if layer < 0 else min(layer, n_layers - 1)


def build_pk_rho_ccdf(d, f, models, p):
    picks = {m: pick_layer(p["layer"], f[m]["n_layers"]) for m in models}
    return _figs().pk_rho_ccdf(d["pk"], picks, f, kind=p.get("kind", "O")), {"layers": picks}


def build_paper1_table3(d, f, models, p):
    lineages = p["lineages"] or {m: [m] for m in models}
    return _p1().table3(d["paper1_capacity"], lineages, p["strong_threshold"], int(p["bootstrap"]),
                        default_lineages=not p["lineages"])


def _act():
    from headgeom.activation import report

    return report


NAT, RP = "activation_natural_return", "activation_read_paths"
ACT_NAT_PARAMS = {"endpoint": "activation/paper1/endpoint", "high_quantile": "activation/paper1/high_quantile",
                  "low_quantile": "activation/paper1/low_quantile"}
ACT = {"shard_models": "activation", "builder_models": "activation"}


# ------------------------------------------------------------------ the registry

_FILES_TABLE = ("Files: ``results/tables/{n}.csv`` (also ``.md``, ``.tex``); provenance: "
                "``results/tables/{n}.prov.json`` (aggregation, params, code version, every input shard with its "
                "sha256 and provenance). Explain one number: ``headgeom audit {n} --row KEY=VALUE --column NAME``.")
_FILES_FIGURE = "Files: ``figures/{n}.png``, ``figures/{n}.pdf``; provenance: ``figures/{n}.prov.json``."

T = "table"
F = "figure"
ST = {"strong_threshold": "tables/strong_threshold"}
NULLS = {"null_types": "pk/nulls/types"}
HEADS, PAIRS, CAP = "paper1_heads", "paper1_pairs", "paper1_capacity"

_ENTRIES = (
    # ---------------------------------------------------------------- paper 1
    # closure_tail and closure_ccdf read the closure columns of the paper 1 per-head shards (one
    # closure computation per layer, the same shards as paper1_table2)
    Output("closure_tail", T, "Paper 1", (HEADS,),
           lambda d, f, m, p: _tables().closure_tail(d[HEADS], m, strong_threshold=p["strong_threshold"]),
           params=ST),
    Output("closure_ccdf", F, "Paper 1", (HEADS,),
           lambda d, f, m, p: _figs().closure_ccdf(d[HEADS], m, threshold=p["strong_threshold"]), params=ST),
    Output("paper1_table2", T, "Paper 1", (HEADS,),
           lambda d, f, m, p: _p1().table2(d[HEADS], m, p["strong_threshold"], p["sweep"]), params=ST | {"sweep": "paper1/sweep"}),
    Output("paper1_table3", T, "Paper 1", (CAP,), build_paper1_table3,
           params=ST | {"bootstrap": "paper1/bootstrap", "lineages": "paper1/lineages"}, shard_models="lineages"),
    Output("paper1_table4", T, "Paper 1", (PAIRS,),
           lambda d, f, m, p: _p1().table4(d[PAIRS], d.get(HEADS, {}), m, p["strong_threshold"]), params=ST),
    Output("paper1_sweep", T, "Paper 1", (HEADS,),
           lambda d, f, m, p: _p1().sweep_table(d[HEADS], m, p["sweep"], int(p.get("bootstrap") or 0)),
           params={"sweep": "paper1/sweep", "bootstrap": "paper1/bootstrap"}),
    Output("paper1_scramble", T, "Paper 1", (HEADS,),
           lambda d, f, m, p: _p1().scramble_table(d[HEADS], m, p["strong_threshold"]), params=ST),
    Output("paper1_layers", T, "Paper 1", (HEADS,),
           lambda d, f, m, p: _p1().layers_table(d[HEADS], m, p["strong_threshold"]), params=ST),
    Output("paper1_factorial", T, "Paper 1", (HEADS,),
           lambda d, f, m, p: _p1().factorial_table(d[HEADS], m)),
    Output("paper1_capacity", T, "Paper 1", (CAP,),
           lambda d, f, m, p: _p1().capacity_table(d[CAP], m, p["strong_threshold"], int(p.get("bootstrap") or 0)),
           params=ST | {"bootstrap": "paper1/bootstrap"}),
    Output("paper1_latent", T, "Paper 1", (HEADS,),
           lambda d, f, m, p: _p1().latent_table(d[HEADS], m, p["strong_threshold"], int(p["bootstrap"]),
                                                 tuple(p["large"] or ())),
           params=ST | {"bootstrap": "paper1/bootstrap", "large": "paper1/large_endpoints"}),
    Output("paper1_rank_audit", T, "Paper 1", (HEADS,),
           lambda d, f, m, p: _p1().rank_audit_table(d[HEADS], f, m, p["tolerance"], p["rank_rtol"]),
           params={"tolerance": "paper1/rank_tolerance", "rank_rtol": "rank_rtol"}),
    Output("paper1_anchor", T, "Paper 1", (HEADS, PAIRS),
           lambda d, f, m, p: _p1().anchor_table(d[PAIRS], d[HEADS], m, p["strong_threshold"],
                                                 **{k: v for k, v in (p.get("band") or {}).items()}),
           params=ST | {"band": "paper1/band"}),
    Output("paper1_closure_ccdf", F, "Paper 1", (HEADS,),
           lambda d, f, m, p: _p1().fig_closure_ccdf(d[HEADS], m, p["strong_threshold"], p["sweep"]),
           params=ST | {"sweep": "paper1/sweep"}),
    Output("paper1_scramble", F, "Paper 1", (HEADS,),
           lambda d, f, m, p: _p1().fig_scramble(d[HEADS], m, p["strong_threshold"]), params=ST),
    Output("paper1_capacity", F, "Paper 1", (CAP,),
           lambda d, f, m, p: _p1().fig_capacity(d[CAP], m, p["strong_threshold"]), params=ST),
    Output("paper1_siblings", F, "Paper 1", (PAIRS,),
           lambda d, f, m, p: _p1().fig_siblings(d[PAIRS], m, p["strong_threshold"]), params=ST),
    # ---------------------------------------------------------------- PK paper
    Output("pk_writing", T, "PK paper", ("pk",),
           lambda d, f, m, p: _tables().pk_writing(d["pk"], m, f, small_angle_deg=p["small_angle_deg"]),
           params={"small_angle_deg": "tables/small_angle_deg"}),
    Output("pk_rho_ccdf", F, "PK paper", ("pk",), build_pk_rho_ccdf,
           params={"layer": "figures/pk_rho_layer", "kind": "figures/pk_rho_kind"}),
    Output("pk_t1_min_angles", T, "PK paper", ("pk", "pk_cross"), lambda d, f, m, p: _pk().table1(d, f, m)),
    Output("pk_t2_lower_bound", T, "PK paper", ("pk_cross",), lambda d, f, m, p: _pk().table2(d, f, m)),
    Output("pk_t3_models", T, "PK paper", (), lambda d, f, m, p: _pk().table3(d, f, m)),
    Output("pk_t4_null_summary", T, "PK paper", ("pk", "pk_cross", "pk_null_within", "pk_null_cross"),
           lambda d, f, m, p: _pk().table4(_conds(d, f, p), m, p["null_types"]), params=NULLS),
    Output("pk_t6_min_angle_vs_reassign", T, "PK paper", ("pk", "pk_null_within"),
           lambda d, f, m, p: _pk().table6(_conds(d, f, p), m), params=NULLS),
    Output("pk_t7_reading_within", T, "PK paper", ("pk", "pk_null_within"),
           lambda d, f, m, p: _pk().table7(d, _conds(d, f, p), f, m), params=NULLS),
    Output("pk_t8_cross_nulls", T, "PK paper", ("pk_cross", "pk_null_cross"),
           lambda d, f, m, p: _pk().table8(_conds(d, f, p), m), params=NULLS),
    Output("pk_t9_weighted", T, "PK paper", ("pk_cross",), lambda d, f, m, p: _pk().table9(d, f, m)),
    Output("pk_self_overlap", T, "PK paper", ("pk_self",), lambda d, f, m, p: _pk().table_self(d, m)),
    Output("pk_base_instruct", T, "PK paper", ("pk",),
           lambda d, f, m, p: _pk().table_base_instruct(d, f, [tuple(x) for x in p["pairs"]]),
           derived=("pairs",)),
    Output("pk_base_instruct_pairs", T, "PK paper", ("pk",),
           lambda d, f, m, p: _bi().table_pairs(d, [tuple(x) for x in p["pairs"]]), derived=("pairs",)),
    Output("pk_ranks", T, "PK paper", ("pk",), lambda d, f, m, p: _pk().table_ranks(d["_provs"]["pk"], m)),
    Output("pk_conditions", T, "PK paper", ("pk", "pk_cross", "pk_null_within", "pk_null_cross"),
           lambda d, f, m, p: _pk().table_conditions(d, _conds(d, f, p), f, m, p["null_types"]), params=NULLS),
    Output("pk_null_samples", T, "PK paper", ("pk", "pk_cross", "pk_null_within", "pk_null_cross"),
           lambda d, f, m, p: _pkl().table_null_samples(d, f, m, p["null_types"]), params=NULLS),
    Output("pk_layer_stats", T, "PK paper", ("pk", "pk_cross"), lambda d, f, m, p: _pkl().table_layer_stats(d, f, m)),
    Output("pk_cross_distance", T, "PK paper", ("pk_cross", "pk_null_cross"),
           lambda d, f, m, p: _pkl().table_cross_distance(d, f, m, p["null_types"]), params=NULLS),
    Output("pk_self_layers", T, "PK paper", ("pk_self",), lambda d, f, m, p: _pkl().table_self_layers(d, m)),
    Output("pk_fig2_rho_ccdf_nulls", F, "PK paper", ("pk", "pk_null_within"),
           lambda d, f, m, p: _pk().fig2(d, f, m, p["null_types"], int(p["random_samples"])),
           params=NULLS | {"random_samples": "figures/pk_fig2_random_samples"}),
    Output("pk_fig2_counts", T, "PK paper", ("pk", "pk_null_within"),
           lambda d, f, m, p: _pk().table_fig2(d, f, m, p["null_types"], int(p["reference_draws"])),
           params=NULLS | {"reference_draws": "figures/pk_random_reference_draws"}),
    Output("pk_fig3_r", F, "PK paper", ("pk", "pk_cross", "pk_null_within", "pk_null_cross"),
           lambda d, f, m, p: _pk().fig3(_conds(d, f, p), m), params=NULLS),
    Output("pk_fig6_depth", F, "PK paper", ("pk",), lambda d, f, m, p: _pk().fig6(d, f, m)),
    Output("pk_fig7_quantiles", F, "PK paper", ("pk", "pk_null_within"), lambda d, f, m, p: _pk().fig7(d, f, m, p["null_types"]),
           params=NULLS),
    Output("pk_fig8_reading_sd", F, "PK paper", ("pk", "pk_null_within"), lambda d, f, m, p: _pk().fig8(d, f, m),
           params=NULLS),
    Output("pk_fig9_cross_heatmaps", F, "PK paper", ("pk_cross", "pk_null_cross"),
           lambda d, f, m, p: _pk().fig9(_conds(d, f, p), f, m), params=NULLS),
    # ---------------------------------------------------------------- activation stage (docs/methods.md §3)
    # paper 1's natural return reads the closure P of the paper 1 per-head shards to pick its heads
    Output(NAT, T, "Paper 1", (NAT, HEADS),
           lambda d, f, m, p: _act().natural_return_table(d[NAT], d[HEADS], m, p), params=ACT_NAT_PARAMS, **ACT),
    Output(NAT, F, "Paper 1", (NAT, HEADS),
           lambda d, f, m, p: _act().natural_return_figure(d[NAT], d[HEADS], m, p), params=ACT_NAT_PARAMS, **ACT),
    Output(RP, T, "PK paper", (RP,), lambda d, f, m, p: _act().read_paths_table(d[RP], m, p), **ACT),
    Output("activation_fig4", F, "PK paper", (RP,), lambda d, f, m, p: _act().read_paths_fig4(d[RP], m, p), **ACT),
    Output("activation_fig5", F, "PK paper", (RP,), lambda d, f, m, p: _act().read_paths_fig5(d[RP], m, p), **ACT),
)


# Captions (reST; Jinja with snakemake.params): the report's caption, docs/outputs.md's description.
CAPTIONS = {
    ('figure', 'closure_ccdf'): (
        "**Paper 1 (walking skeleton).** CCDF of closure P per model (solid) against its cyclic wrong-V "
        "control (dashed); dotted line at t = {{ snakemake.params.strong_threshold }}."
    ),
    ('figure', 'paper1_capacity'): (
        "**Paper 1, feasible capacity.** Feasible capacity against attained closure for strong, matched and "
        "sampled heads."
    ),
    ('figure', 'paper1_closure_ccdf'): (
        "**Paper 1, closure CCDF.** Closure CCDF per model with the wrong-V control and the threshold sweep "
        "(t = {{ snakemake.params.strong_threshold }})."
    ),
    ('figure', 'paper1_scramble'): (
        "**Paper 1, orientation scramble.** Trained closure against the median of each head's orientation "
        "scrambles (t = {{ snakemake.params.strong_threshold }})."
    ),
    ('figure', 'paper1_siblings'): (
        "**Paper 1, sibling law.** ECDFs of the fixed-gain explanation F_ij and the gain ratio ρ_ij against "
        "the next-group control (dashed)."
    ),
    ('figure', 'pk_fig2_rho_ccdf_nulls'): (
        "**PK paper, Figure 2.** Fraction of writing-space pairs with overlap ≥ ρ in the layer at the upper "
        "median of per-layer dispersion: observed (black staircase) against each null model and random "
        "subspaces ({{ snakemake.params.random_samples }} samples of the layer's shape; "
        "``figures.pk_fig2_random_samples``): the curve of each sample, their median (line) and 5-95 "
        "percentile band; dotted at d/D. Cited counts: table ``pk_fig2_counts``."
    ),
    ('figure', 'pk_fig3_r'): (
        "**PK paper, Figure 3.** r = observed SD / largest null SD for every within-layer and cross-layer "
        "comparison (log scale); bars at the median, numbers count r > 1; dashed at r = 1."
    ),
    ('figure', 'pk_fig6_depth'): (
        "**PK paper, Figure 6.** Depth profile of the mean (top) and dispersion (bottom) of writing-space ρ; "
        "dotted: isotropic value and random-subspace SD."
    ),
    ('figure', 'pk_fig7_quantiles'): (
        "**PK paper, Figure 7.** Per-layer median and 95th percentile of writing-space ρ against the same "
        "quantiles' 5-95 percentile range over each null's samples."
    ),
    ('figure', 'pk_fig8_reading_sd'): (
        "**PK paper, Figure 8.** Dispersion of Q and K reading-space overlap per layer against the largest "
        "column-reassignment sample."
    ),
    ('figure', 'pk_fig9_cross_heatmaps'): (
        "**PK paper, Figure 9.** Writer layer × reader layer: log10 r and whether the mean ρ lies below (-1) "
        "or above (+1) every null sample, per reading kind."
    ),
    ('figure', 'pk_rho_ccdf'): (
        "**PK paper.** CCDF of ρ over the {{ snakemake.params.kind }}-{{ snakemake.params.kind }} pairs of "
        "one layer per model (``figures.pk_rho_layer`` = {{ snakemake.params.layer }}); dotted at d/D."
    ),
    ('table', 'activation_natural_return'): (
        "**Paper 1, natural return on real text (activation stage).** Per model: the high-closure heads (P at "
        "or above the {{ snakemake.params.high_quantile }} quantile) paired with layer-matched low-closure heads "
        "(P at or below the {{ snakemake.params.low_quantile }} quantile) in eligible layers; medians of the "
        "alignment of the natural post-O outputs y with their return T y (endpoint {{ snakemake.params.endpoint "
        "}}) for high heads, their cyclic wrong-V control and the low heads; layers where both contrasts are "
        "positive; median RMS return magnitude g_y of high and low heads."
    ),
    ('figure', 'activation_natural_return'): (
        "**Paper 1, natural return on real text.** Per-head alignment of y with T y: high-closure heads "
        "(blue), their wrong-V control (red) and layer-matched low-closure heads (grey), medians marked."
    ),
    ('table', 'activation_read_paths'): (
        "**PK paper, §5.4 read paths on real text (activation stage).** Per model and reading kind (Q/K/V), "
        "over every writer head of layer l and reader head of a later layer: linear against normalization "
        "term of the first-order response (ratios, relative RMS error, cross-term signs), projected energy "
        "share tr(P_V C)/tr C of actual writes against ρ (Spearman, Pearson, share/ρ quantiles, per layer "
        "pair), linear-term energy against ρ, and composition scores against ρ. Models without a "
        "pre-attention norm (post-LN BERT) have the normalization columns NaN and a flag (not measured)."
    ),
    ('figure', 'activation_fig4'): (
        "**PK paper, Figure 4.** Measured projected energy share of actual writes against ρ (hexbin, log "
        "counts; dashed: isotropic writes, share = ρ) per reading kind, and the distribution of share/ρ "
        "(median and 5-95 percentile band)."
    ),
    ('figure', 'activation_fig5'): (
        "**PK paper, Figure 5.** Spearman correlation of share with ρ per writer → reader layer pair, per "
        "reading kind; V linear-term energy against ρ."
    ),
    ('table', 'closure_tail'): (
        "**Paper 1, Table 2 shape (walking skeleton).** Strong closure tail per model: layers, heads, share "
        "and count of heads with closure P ≥ t = {{ snakemake.params.strong_threshold }} "
        "(``tables.strong_threshold``), median P, the cyclic wrong-V control (median, max, count ≥ t; "
        "undefined with one KV group), share of negative α among strong heads, and return gain g_T = ‖T²‖/‖T‖ "
        "of strong and of all heads."
    ),
    ('table', 'paper1_anchor'): (
        "**Paper 1, value anchors.** Value anchors P_V, oblique share, same-layer retrieval rank of the "
        "trained V, and the left-zero band of strong sibling pairs: all strong pairs, and the band pairs by "
        "``paper1.band.membership`` = {{ snakemake.params.band.membership }} (explanation: P_iP_j ≈ P_i both ways, "
        "F_ij, F_ji ≥ {{ snakemake.params.band.explanation }}; strong: every strong pair); ranges over models with "
        "at least {{ snakemake.params.band.min_pairs }} such pairs."
    ),
    ('table', 'paper1_capacity'): (
        "**Paper 1, feasible capacity.** Cap_hat and attainment E of strong, layer-matched ordinary and "
        "hash-sampled heads (t = {{ snakemake.params.strong_threshold }}), and beside them the capacity "
        "from the random starts only and E from it; layer-clustered bootstrap 95% intervals of the closure "
        "and capacity gaps ({{ snakemake.params.bootstrap }} replicates, ``paper1.bootstrap``)."
    ),
    ('table', 'paper1_factorial'): (
        "**Paper 1, factorial D×K.** Layer mean of the head interaction I_h over exhaustive donor "
        "reassignment, and real minus the wrong-V control."
    ),
    ('table', 'paper1_latent'): (
        "**Paper 1, latent closure.** Latent closure P_I(K) after isoclinic normalization, support isotropy "
        "I_D conditional on it, and the perturbation split (a, b, w) of preserved and reduced cores; both AUROCs "
        "also against layer-matched ordinary heads (the large-endpoint design; row \"pooled large\" over "
        "``paper1.large_endpoints``), with model/layer-clustered bootstrap 95% intervals "
        "({{ snakemake.params.bootstrap }} replicates)."
    ),
    ('table', 'paper1_layers'): (
        "**Paper 1, per layer.** Per layer: scramble shares and median differences, Haar differences and the "
        "factorial D×K endpoint with its wrong-V control."
    ),
    ('table', 'paper1_rank_audit'): (
        "**Paper 1, rank audit.** Every participating O/V factor (each head's O and its paired V): how many "
        "have full numerical column rank at the tolerance ``paper1.rank_tolerance`` = {{ "
        "snakemake.params.tolerance }} (rank_rtol: s_min/s_max > ``rank_rtol``; eps: > max(m, n)·ε₆₄), and the "
        "smallest observed s_min/s_max (paper: 2.63e-4)."
    ),
    ('table', 'paper1_scramble'): (
        "**Paper 1, orientation scramble.** Trained closure against signed-permutation scrambles and the Haar "
        "audit of K (singular values, D and spans fixed)."
    ),
    ('table', 'paper1_sweep'): (
        "**Paper 1, threshold sweep.** Tail size, controls reaching t, and the latent-closure and I_D AUROCs "
        "at each threshold of ``paper1.sweep``, with model/layer-clustered bootstrap 95% intervals "
        "({{ snakemake.params.bootstrap }} replicates, ``paper1.bootstrap``)."
    ),
    ('table', 'paper1_table2'): (
        "**Paper 1, Table 2.** Strong closure tail per model with the cyclic wrong-V control and return gain "
        "g_T (t = {{ snakemake.params.strong_threshold }}; sweep ends {{ snakemake.params.sweep|first }} and "
        "{{ snakemake.params.sweep|last }})."
    ),
    ('table', 'paper1_table3'): (
        "**Paper 1, Table 3.** Trajectories: closure P, scramble median R, feasible capacity Cap_hat and "
        "attainment E per checkpoint of each lineage (groups fixed at the final checkpoint; t = {{ "
        "snakemake.params.strong_threshold }}), with the attainment gap and its hierarchical-bootstrap "
        "interval ({{ snakemake.params.bootstrap }} replicates), and the same intervals for the closure and "
        "capacity gaps."
    ),
    ('table', 'paper1_table4'): (
        "**Paper 1, Table 4.** Shared-value sibling law: right heads j with P(T_j) ≥ {{ "
        "snakemake.params.strong_threshold }} and every sibling i in their KV group; median fixed-gain "
        "explanation F_ij and gain ratio ρ_ij against the next-group control."
    ),
    ('table', 'pk_fig2_counts'): (
        "**PK paper, Figure 2 and §5.3 counts.** Per model, the Figure 2 layer (upper median of per-layer "
        "dispersion): pairs, median, 95th percentile and maximum of ρ, pairs below every value and above "
        "every value of each null's samples; over the layers with null samples, those whose median lies "
        "below every null sample's median and whose 95th percentile lies above every null sample's; and "
        "the sampled random-subspace reference, mean ± SD of ρ over {{ snakemake.params.reference_draws }} "
        "random pairs (``figures.pk_random_reference_draws``), beside d/D and the analytic SD."
    ),
    ('table', 'pk_base_instruct'): (
        "**PK paper, Appendix E (base vs instruct).** Base against instruct (models with ``pair:``): absolute "
        "per-layer differences of writing-space mean ρ, SD and minimum angle."
    ),
    ('table', 'pk_base_instruct_pairs'): (
        "**PK paper, §5.5 (base vs instruct, per pair).** Every declared base/instruct pair (``pair:``): "
        "writing-space pairs matched by layer and heads; max and median of |Δρ| and of |Δρ|/ρ_base (with "
        "where the maxima occur) per layer and over all layers (row ``all``, with the range and median of "
        "the per-layer medians), and the layers whose output-projection tensors differ (sha256)."
    ),
    ('table', 'pk_conditions'): (
        "**PK paper, every condition (Figures 3 and 9 data).** One row per layer (within-layer pairs of each "
        "kind) and per writer → reader layer pair (across layers, per reading kind): pairs, mean, SD, median, "
        "95th percentile and maximum of ρ, minimum angle, shares above 2 d/D and below d/(2D), r = SD / "
        "largest null SD, the empirical p of the SD against each null ((k+1)/(n+1)), and whether the mean "
        "lies below / above every null sample (null types: {{ snakemake.params.null_types|join(', ') }})."
    ),
    ('table', 'pk_null_samples'): (
        "**PK paper, §5.3 and Appendix F (the null samples).** One row per condition (a layer's within-layer "
        "pairs of one kind, or a writer → reader layer pair of one reading kind) and null model (null types: "
        "{{ snakemake.params.null_types|join(', ') }}): samples, the observed SD beside the smallest, mean and "
        "largest sample SD (whether it exceeds every sample) and its ratio to the mean sample SD, the observed mean ρ beside the samples' means, and the observed "
        "minimum angle beside the samples' minimum angles (whether it lies below / above every sample)."
    ),
    ('table', 'pk_layer_stats'): (
        "**PK paper, §5.2, Appendices F and G (per layer and layer pair).** One row per layer (within-layer "
        "pairs of each kind) and per writer → reader layer pair (per reading kind): pairs, mean and SD of ρ, "
        "mean ρ over the isotropic value d/D, SD over the random-subspace SD, the mean over pairs of the pair "
        "minimum angle, and across layers the distance reader − writer and the mean and median over head "
        "pairs of the weighted measure D‖RB‖²/(‖R‖²‖B‖²)."
    ),
    ('table', 'pk_cross_distance'): (
        "**PK paper, Appendix F (ρ by layer distance).** Per model, reading kind and distance Δ = reader − "
        "writer layer: layer pairs, the mean over them of their mean ρ (and over d/D), layer pairs with null "
        "samples, and those whose mean lies below / above every null sample, also as k/n (null types: "
        "{{ snakemake.params.null_types|join(', ') }})."
    ),
    ('table', 'pk_self_layers'): (
        "**PK paper, Appendix H (per layer).** Self-head overlap per layer and test (V reading vs writing, Q "
        "vs own group's K, Q vs writing): the observed mean over heads of ρ, the label-permutation mean, its "
        "p, permutations and whether they were exhaustive."
    ),
    ('table', 'pk_ranks'): (
        "**PK paper, §5.1 setup (ranks and direct sums).** Numerical ranks of the head spaces at relative "
        "tolerance ``rank_rtol`` (smallest and largest head rank, rank of the layer's sum), the direct-sum "
        "defect Σ_i rank − rank of the sum against the defect forced by dimension, max(0, H d − D), layers "
        "above the forced defect, and what was folded into the reading spaces."
    ),
    ('table', 'pk_self_overlap'): (
        "**PK paper, Appendix H.** Self-head overlap: mean over heads of ρ between a head's own spaces (V "
        "reading vs writing, Q vs own group's K, Q vs writing) against label permutations (GQA: every "
        "labelling of the KV groups); range over layers, largest p, permutations and whether they were "
        "exhaustive."
    ),
    ('table', 'pk_t1_min_angles'): (
        "**PK paper, Table 1.** Minimum principal angle over head-subspace pairs, within a layer (O-O, Q-Q, "
        "K-K, V-V) and across layers (writer O of layer l against every Q/K/V reader of a later layer): "
        "pairs, minimum angle, median pair angle and pairs under 1°."
    ),
    ('table', 'pk_t2_lower_bound'): (
        "**PK paper, Table 2.** Lower bound max_i ρ(R, U_i) ≥ λ_min(S)/H with reading spaces fixed: range of "
        "λ_min(S) over writer layers, layer pairs, the observed minimum over readers of the maximum overlap "
        "(Q/K/V), layer pairs where it falls below the isotropic value, and numerical violations of the bound "
        "(expected 0)."
    ),
    ('table', 'pk_t3_models'): (
        "**PK paper, Table 3.** Models and isotropic values: D, d, query / key-value heads, layers, "
        "writing-space pairs per layer, d/D and the random-subspace SD (from the fetched manifests)."
    ),
    ('table', 'pk_t4_null_summary'): (
        "**PK paper, Table 4.** Dispersion of ρ against both null models (null types: {{ "
        "snakemake.params.null_types|join(', ') }}; samples per null from ``pk.nulls``): conditions (layers "
        "or layer pairs), conditions whose SD exceeds every null sample, median r = SD / max null SD, and the "
        "median ratio of SD to each null's mean SD."
    ),
    ('table', 'pk_t6_min_angle_vs_reassign'): (
        "**PK paper, Table 6.** Layers whose observed minimum writing-space angle is not below every "
        "column-reassignment sample (observed minimum angle and the minimum over reassignment samples)."
    ),
    ('table', 'pk_t7_reading_within'): (
        "**PK paper, Table 7.** Overlap between same-kind reading spaces within a layer: pairs per layer, "
        "layer range of mean ρ, layers whose mean is below all null samples, range of the SD, layers whose SD "
        "is above all null samples, and the minimum angle over all pairs."
    ),
    ('table', 'pk_t8_cross_nulls'): (
        "**PK paper, Table 8.** Writer-reader overlap across layers against the null models, per reading "
        "kind: layer pairs, layer pairs whose SD exceeds all null samples, median SD / rotation-null mean, "
        "and layer pairs whose mean is below / above all null samples."
    ),
    ('table', 'pk_t9_weighted'): (
        "**PK paper, Table 9.** Largest ρ and largest spectral-weighted measure D‖RB‖²/(‖R‖²‖B‖²) per writer "
        "→ reader layer pair (top three by each), with the mean weighted measure."
    ),
    ('table', 'pk_writing'): (
        "**PK paper, Table 5.** Writing spaces within one layer: per model D, d, heads, layers, isotropic "
        "value d/D, the per-layer mean ρ of writing-space pairs (layer median, min, max), its dispersion SD "
        "over pairs (median, min, max), the random-subspace SD, and the layers holding a pair whose minimum "
        "principal angle is under {{ snakemake.params.small_angle_deg }}° (``tables.small_angle_deg``)."
    ),
}


def _captioned(o: Output) -> Output:
    from dataclasses import replace

    return o if o.caption else replace(o, caption=CAPTIONS[(o.kind, o.name)])


def _with_choices(o: Output) -> Output:
    """Outputs reading the paper 1 per-head shards take config ``choices:`` (the reading of each
    reconstructed choice; headgeom.reports.choices) as a param."""
    from dataclasses import replace

    return replace(o, params={**o.params, "choices": "choices"}) if HEADS in o.families else o


_ENTRIES = tuple(_with_choices(_captioned(o)) for o in _ENTRIES)

OUTPUTS: dict[tuple[str, str], Output] = {(o.kind, o.name): o for o in _ENTRIES}
TABLES = {o.name: o for o in _ENTRIES if o.kind == "table"}
FIGURES = {o.name: o for o in _ENTRIES if o.kind == "figure"}


def register(out: Output) -> Output:
    """Add an output (tests add toy ones; the pipeline's own are the entries above)."""
    if out.kind not in KINDS:
        raise ValueError(f"output {out.name!r}: kind must be one of {KINDS}, not {out.kind!r}")
    if (out.kind, out.name) in OUTPUTS:
        raise ValueError(f"{out.kind} {out.name!r} is already registered")
    OUTPUTS[(out.kind, out.name)] = out
    (TABLES if out.kind == "table" else FIGURES)[out.name] = out
    return out


def output(kind: str, name: str) -> Output:
    try:
        return OUTPUTS[(kind, name)]
    except KeyError:
        known = ", ".join(n for k, n in OUTPUTS if k == kind)
        raise KeyError(f"no {kind} {name!r} in the output registry (known: {known})") from None


# ------------------------------------------------------------------ building one output


def read_inputs(inputs: dict[str, list[str]]) -> tuple[dict, list[dict]]:
    """{family: paths} -> (data, provenance records of every shard, family by family)."""
    from headgeom.io.shards import read_shards

    data, provs = {"_provs": {}}, []
    for fam, paths in inputs.items():
        cols, pv = read_shards(list(paths))
        data[fam] = cols
        data["_provs"][fam] = pv
        provs += pv
    return data, provs


def manifest_fields(manifests: list[str]) -> dict[str, dict]:
    return {Path(p).parent.name: json.loads(Path(p).read_text())["fields"] for p in manifests}


class ReadLog(dict):
    """One family's columns, recording in ``log`` the name of every column a builder reads
    (``headgeom audit`` shows the shard rows and columns behind a number from it). Iterating
    over the columns counts as reading all of them."""

    def __init__(self, cols: dict, log: set):
        super().__init__(cols)
        self.log = log

    def __getitem__(self, k):
        self.log.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        if k in self:
            self.log.add(k)
        return super().get(k, default)

    def _all(self):
        self.log.update(super().keys())

    def __iter__(self):
        self._all()
        return super().__iter__()

    def items(self):
        self._all()
        return super().items()

    def values(self):
        self._all()
        return super().values()

    def copy(self):
        self._all()
        return dict(super().items())


def traced(data: dict, log: dict[str, set]) -> dict:
    """``data`` with each family's columns wrapped in a ReadLog writing to ``log[family]``."""
    out = dict(data)
    for fam, cols in data.items():
        if fam != "_provs" and isinstance(cols, dict):
            out[fam] = ReadLog(cols, log.setdefault(fam, set()))
    return out


def prepare(kind: str, name: str, inputs: dict[str, list[str]], manifests: list[str], params: dict):
    """(output entry, data, provenance records, fields): what a builder is given, read from the shards."""
    out = output(kind, name)
    data, provs = read_inputs({f: inputs.get(f, []) for f in out.families})
    if params.get("choices") and data.get(HEADS):
        from headgeom.reports.choices import apply

        data[HEADS] = apply(data[HEADS], params["choices"])
    return out, data, provs, manifest_fields(manifests)


def build_output(kind: str, name: str, inputs: dict[str, list[str]], manifests: list[str], models: list[str],
                 outputs: dict[str, str], params: dict) -> None:
    """Build one registered table or figure from its shards and write it with provenance
    (what workflow/scripts/output.py and ``headgeom audit`` call)."""
    out, data, provs, fields = prepare(kind, name, inputs, manifests, params)
    built = out.build(data, fields, list(models), params)
    if kind == "table":
        built.aggregation = f"headgeom.reports.outputs: table {name!r}"
        built.write(outputs, provs, params)
        return
    from headgeom.reports.figures import pyplot, save

    fig, extra = built if isinstance(built, tuple) else (built, {})
    save(fig, outputs, {"figure": name, "params": params, "inputs": provs, **extra})
    pyplot().close(fig)
