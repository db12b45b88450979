"""Figures (PNG + PDF), each with a provenance sidecar."""

from __future__ import annotations


import numpy as np

from headgeom.io.files import atomic_path, write_json
from headgeom.core.provenance import code_version


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ccdf(x):
    x = np.sort(np.asarray(x, dtype=float)[np.isfinite(x)])
    if x.size == 0:
        return x, x
    return x, 1.0 - np.arange(x.size) / x.size


def save(fig, outputs: dict[str, str], prov: dict) -> None:
    for fmt in ("png", "pdf"):
        if fmt in outputs:
            with atomic_path(outputs[fmt]) as tmp:
                fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight",
                            metadata={"Software": None} if fmt == "png" else {"CreationDate": None})
    if "prov" in outputs:
        write_json(outputs["prov"], {**prov, "code": code_version()})


def closure_ccdf(cols: dict, models: list[str], threshold: float = 0.9):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, m in enumerate(models):
        sel = cols["model"] == m
        c = f"C{i}"
        x, y = ccdf(cols["P"][sel])
        ax.step(x, y, where="post", color=c, label=f"{m} (trained)")
        xw, yw = ccdf(cols["P_wrong_v"][sel])
        if xw.size:
            ax.step(xw, yw, where="post", color=c, ls="--", alpha=0.8, label=f"{m} (wrong-V)")
    ax.axvline(threshold, color="k", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("closure P")
    ax.set_ylabel("fraction of heads with P ≥ x")
    ax.set_title("Closure CCDF against the wrong-V control")
    ax.legend(fontsize=7)
    return fig


def pk_rho_ccdf(cols: dict, picks: dict[str, int], fields: dict[str, dict], kind: str = "O"):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, (m, layer) in enumerate(picks.items()):
        sel = (cols["model"] == m) & (cols["layer"] == layer) & (cols["kind"] == kind)
        x, y = ccdf(cols["rho"][sel])
        c = f"C{i}"
        ax.step(x, y, where="post", color=c, label=f"{m} layer {layer}")
        f = fields[m]
        ax.axvline(f["d_head"] / f["d_model"], color=c, ls=":", lw=1)
    ax.set_xlabel(f"ρ ({kind}-{kind} pairs)")
    ax.set_ylabel("fraction of pairs with ρ ≥ x")
    ax.set_title("ρ CCDF of one layer; dotted: isotropic d/D")
    ax.legend(fontsize=7)
    return fig
