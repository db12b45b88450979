"""Switches for the reconstructed choices of paper 1 (*(choice)*, docs/methods.md), as pure
column selection.

Weight-space choices of paper 1 are computed every way in the ``paper1_heads`` shards (extra
columns) and picked at the tables by config ``choices:`` (the outputs reading those shards get it
as a param, headgeom.outputs.registry), so switching reruns tables, never shards, and the default
reproduces the earlier numbers exactly:

  choices.return_gain         rms      g_T = ||T^2||_F / ||T||_F (RMS gain of T on its own outputs)
                              fitted   |alpha*| = |<T^2,T>| / ||T||^2 (the fitted scale's magnitude)
  choices.isotropy            participation  I_D = (tr D)^2 / (d tr D^2)
                              min_max        min_i D_i / max_i D_i (column I_D_minmax)
  choices.factorial_contrast  interaction    double-centred S[h,h] - row - column + rest
                              row            S[h,h] - mean_{j!=h} S[h,j] (own K, other donors' D)
                              column         S[h,h] - mean_{i!=h} S[i,h] (own D, other donors' K)

What each alternative does to the ledger: headgeom.verify.sensitivity."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headgeom.core.errors import ConfigError


@dataclass(frozen=True)
class Switch:
    key: str  # under config `choices:`
    default: str
    alternatives: tuple  # every value, default first
    method: str  # where the methods make the choice (docs/methods.md §n)
    columns: tuple  # paper1_heads columns it replaces


SWITCHES = (
    Switch("return_gain", "rms", ("rms", "fitted"), "methods §1 return gain g_T", ("g_T",)),
    Switch("isotropy", "participation", ("participation", "min_max"), "methods §1 isotropy I_D", ("I_D",)),
    Switch("factorial_contrast", "interaction", ("interaction", "row", "column"),
           "methods §1 factorial D x K contrast", ("I_factorial", "I_factorial_ctrl")),
)
DEFAULTS = {s.key: s.default for s in SWITCHES}


def _check(choices: dict) -> dict:
    out = dict(DEFAULTS)
    for k, v in (choices or {}).items():
        sw = next((s for s in SWITCHES if s.key == k), None)
        if sw is None:
            raise ConfigError(f"config: choices.{k}: no such switch (known: {', '.join(DEFAULTS)})")
        if v not in sw.alternatives:
            raise ConfigError(f"config: choices.{k}: {v!r} is not one of {', '.join(sw.alternatives)}")
        out[k] = v
    return out


def _need(cols: dict, name: str, key: str, value: str) -> np.ndarray:
    if name not in cols:
        raise ConfigError(f"choices.{key}: {value} needs the paper1_heads column {name!r}, which these shards "
                          "lack (written by an older headgeom): rerun the paper1_heads jobs")
    return cols[name]


def apply(cols: dict, choices: dict | None) -> dict:
    """The paper1_heads columns as the chosen readings define them (a new dict; the default
    choices return the columns unchanged)."""
    ch = _check(choices)
    if not cols or ch == DEFAULTS:
        return cols
    out = dict(cols)
    if ch["return_gain"] == "fitted":
        out["g_T"] = np.abs(np.asarray(cols["alpha"], dtype=float))
    if ch["isotropy"] == "min_max":
        out["I_D"] = _need(cols, "I_D_minmax", "isotropy", "min_max")
    c = ch["factorial_contrast"]
    if c != "interaction":
        out["I_factorial"] = _need(cols, f"I_factorial_{c}", "factorial_contrast", c)
        out["I_factorial_ctrl"] = _need(cols, f"I_factorial_ctrl_{c}", "factorial_contrast", c)
    return out
