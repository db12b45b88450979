"""Paper 1's natural return on real text (the activation stage): its table and figure (statistics in
headgeom.methods.paper1.activations)."""

from __future__ import annotations

import numpy as np

from headgeom.methods.paper1.activations import natural_return_summary
from headgeom.outputs.formats import Table, pyplot
from headgeom.outputs.paper1.common import NATURAL_RETURN, column, figure, table
from headgeom.outputs.registry import HEADS

#: the config params of the natural-return outputs
NATURAL_RETURN_PARAMS = {"endpoint": "activation/paper1/endpoint", "high_quantile": "activation/paper1/high_quantile",
                         "low_quantile": "activation/paper1/low_quantile"}


@table("p1_activations_natural_return", families=(NATURAL_RETURN, HEADS), params=NATURAL_RETURN_PARAMS,
       shard_models="activation", builder_models="activation",
       headlines=(("align_high", "natural return: median alignment, high-closure heads"),
                  ("align_low", "natural return: median alignment, low-closure heads"),
                  ("align_wrong_v", "natural return: median alignment, wrong V")))
def p1_activations_natural_return(activation_natural_return: dict, paper1_heads: dict, models, endpoint: str = "pooled",
                                  high_quantile: float = 0.9, low_quantile: float = 0.5) -> Table:
    """**Paper 1, natural return on real text (activation stage).** Per model: the high-closure heads (P at or
    above the {{ snakemake.params.high_quantile }} quantile) paired with layer-matched low-closure heads
    (P at or below the {{ snakemake.params.low_quantile }} quantile) in eligible layers; medians of the
    squared directional alignment of the natural post-O outputs y with their return T y (endpoint {{
    snakemake.params.endpoint }}) for high heads, their cyclic wrong-V control and the low heads; layers
    where both contrasts are positive; median RMS return magnitude g_y of high and low heads."""
    rows = [{"model": m, **natural_return_summary(activation_natural_return, paper1_heads, m, high_quantile, low_quantile)[0]}
            for m in models]
    return Table(
        columns=[column("model", "Model"), column("pairs", "Pairs"), column("heads", "Heads"),
                 column("eligible_layers", "Eligible layers"),
                 column("align_high", "High", "{:.3f}"), column("align_wrong_v", "Wrong-V", "{:.2e}"),
                 column("align_low", "Low", "{:.3f}"), column("layers_both_positive", "Layers both > 0"),
                 column("g_y_high", "g_y high", "{:.3f}"), column("g_y_low", "g_y low", "{:.3f}")],
        rows=rows,
        notes=(f"Endpoint: {endpoint}; high = top {1 - high_quantile:.0%} of the model's closure P, low pool = "
               f"P <= its {low_quantile:.0%} quantile, paired within eligible layers. Wrong-V is undefined (NaN) for "
               "MQA models (one KV group)."),
    )


@figure("p1_fig_activations_natural_return", families=(NATURAL_RETURN, HEADS), params=NATURAL_RETURN_PARAMS,
        shard_models="activation", builder_models="activation")
def p1_fig_activations_natural_return(activation_natural_return: dict, paper1_heads: dict, models,
                                      high_quantile: float = 0.9, low_quantile: float = 0.5):
    """**Paper 1, natural return on real text.** Per-head alignment of y with T y: high-closure heads (blue),
    their wrong-V control (red) and layer-matched low-closure heads (grey), medians marked."""
    populations = {m: natural_return_summary(activation_natural_return, paper1_heads, m, high_quantile, low_quantile)[1]
                   for m in models}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.9 * max(len(models), 2) + 1, 3.6))
    labels, data, pos, colors = [], [], [], []
    for i, m in enumerate(models):
        for k, (name, c) in enumerate((("high", "C0"), ("wrong_v", "C3"), ("low", "C7"))):
            x = np.asarray(populations[m][name], float)
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
