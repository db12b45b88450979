"""What the PK paper's output modules share: their decorators, the shard families and config params
they read, the comparisons the tables list, and the text of a few cells."""

from __future__ import annotations

import numpy as np

from headgeom.outputs.registry import decorators

table, figure = decorators("PK paper")

#: the config param of every output comparing with the null models
NULL_TYPES_PARAM = {"null_types": "pk/nulls/types"}
#: the families of the within-layer and cross-layer comparisons with their null samples
WITHIN_WITH_NULLS = ("pk_within", "pk_null_within")
CROSS_WITH_NULLS = ("pk_cross", "pk_null_cross")
ALL_PK_FAMILIES = ("pk_within", "pk_cross", "pk_null_within", "pk_null_cross")
#: the activation stage's read-path family, and the models its outputs take
READ_PATHS = "activation_read_paths"
ACTIVATION_MODELS = {"shard_models": "activation", "builder_models": "activation"}

#: (scope, kind) of every comparison Tables 1 and 4 and Figure 3 list, in their order
COMPARISONS = [("within", "O"), ("within", "Q"), ("within", "K"), ("within", "V"),
               ("cross", "Q"), ("cross", "K"), ("cross", "V")]
READING_KINDS = ("Q", "K", "V")
FOUR_PLACES, TWO_PLACES = "{:.4f}", "{:.2f}"


def comparison_label(scope: str, kind: str) -> str:
    """A comparison's name in the tables ("writing, within layer", "writing -> Q, across layers")."""
    return {"O": "writing, within layer"}.get(kind, f"{kind} reading, within layer") if scope == "within" \
        else f"writing -> {kind}, across layers"


def range_text(vals, fmt: str = "{:.3f}") -> str:
    """"min – max" of the finite values ("–" when none)."""
    v = np.asarray([x for x in vals if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return "–"
    return (fmt + " – " + fmt).format(v.min(), v.max())


def samples_text(cs) -> str:
    """The null sample counts n behind r (every value of every condition, e.g. "30" or "3/30")."""
    ns = sorted({n for c in cs for n in (c.get("n_samples") or {}).values() if n})
    return "/".join(str(n) for n in ns) if ns else "–"


def integer_layers(fig) -> None:
    """Layer axes show whole layers (no 2.5)."""
    from matplotlib.ticker import MaxNLocator

    for a in fig.axes:
        a.xaxis.set_major_locator(MaxNLocator(integer=True))


def finish_layer_panels(fig, first_ax, ylabel: str):
    """The end of a figure with one panel of layers per model: the y label and legend on the first
    panel, whole layers on the x axes, a tight layout; (figure, no extra provenance)."""
    first_ax.set_ylabel(ylabel)
    first_ax.legend(fontsize=6)
    integer_layers(fig)
    fig.tight_layout()
    return fig, {}
