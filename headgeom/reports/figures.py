"""Figures (PNG + PDF), each with a provenance sidecar."""

from __future__ import annotations


import numpy as np

from headgeom.io.files import atomic_path, write_set
from headgeom.core.provenance import code_version


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ccdf(x):
    """Sorted finite values x_i and the fraction of values >= x_i (ties: the first copy's)."""
    x = np.sort(np.asarray(x, dtype=float)[np.isfinite(x)])
    if x.size == 0:
        return x, x
    return x, 1.0 - np.arange(x.size) / x.size


def ccdf_steps(x):
    """Vertices of the staircase of S(t) = fraction of values >= t, the curve the figures draw.

    S is left-continuous: S(t) = (n - i)/n on (x_{i-1}, x_i] (sorted x). Drawing (x_i, S(x_i))
    with ``step(where="post")`` puts each level on [x_i, x_{i+1}), one step too high; these
    vertices draw each level on its own interval, drop at every x_i, and stop at (x_max, 1/n)
    (the drop to 0 is left out so that log axes can show the curve)."""
    x = np.sort(np.asarray(x, dtype=float)[np.isfinite(x)])
    n = x.size
    if n == 0:
        return x, x
    levels = (n - np.arange(n + 1)) / n  # S on (x_{i-1}, x_i] for i = 0..n (level n: 0)
    xs = np.repeat(x, 2)
    ys = np.empty(2 * n)
    ys[0::2] = levels[:-1]
    ys[1::2] = levels[1:]
    return xs[:-1], ys[:-1]


def step_ccdf(ax, values, **kw):
    """Draw the CCDF staircase of ``values`` (ccdf_steps) on ``ax``; returns the line or None."""
    xs, ys = ccdf_steps(values)
    if xs.size == 0:
        return None
    return ax.plot(xs, ys, **kw)[0]


def save(fig, outputs: dict[str, str], prov: dict) -> None:
    """PNG and PDF, then the sidecar last with their sha256s (io.write_set: a set or nothing)."""

    def writer(fmt):
        return lambda tmp: fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight",
                                       metadata={"Software": None} if fmt == "png" else {"CreationDate": None})

    writers = {fmt: writer(fmt) for fmt in ("png", "pdf") if fmt in outputs}
    if "prov" not in outputs:
        for fmt, w in writers.items():
            with atomic_path(outputs[fmt]) as tmp:
                w(tmp)
        return
    write_set(outputs, {}, {**prov, "code": code_version()}, writers=writers)


def closure_ccdf(cols: dict, models: list[str], threshold: float = 0.9):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, m in enumerate(models):
        sel = cols["model"] == m
        c = f"C{i}"
        step_ccdf(ax, cols["P"][sel], color=c, label=f"{m} (trained)")
        step_ccdf(ax, cols["P_wrong_v"][sel], color=c, ls="--", alpha=0.8, label=f"{m} (wrong-V)")
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
        c = f"C{i}"
        step_ccdf(ax, cols["rho"][sel], color=c, label=f"{m} layer {layer}")
        f = fields[m]
        ax.axvline(f["d_head"] / f["d_model"], color=c, ls=":", lw=1)
    ax.set_xlabel(f"ρ ({kind}-{kind} pairs)")
    ax.set_ylabel("fraction of pairs with ρ ≥ x")
    ax.set_title("ρ CCDF of one layer; dotted: isotropic d/D")
    ax.legend(fontsize=7)
    return fig
