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

The other reconstructed choices are config values of tables, of per-layer jobs or of the forward
pass; ``TABLE_SWITCHES``, ``SHARD_SWITCHES`` and ``FORWARD_SWITCHES`` below declare them with what
each can change (the ``kind`` of its alternatives: ``tables`` rebuilds tables from the run's
shards, ``shards`` recomputes one shard family from the stored activations, ``forward`` reruns the
forward passes and recomputes every activation shard). This is the one list of switches: the choice
sensitivity (headgeom.publish.choice_sensitivity, headgeom.verify.sensitivity), its rules (workflow/rules/sensitivity.smk), ``headgeom plan``
and the docs read it.

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


@dataclass(frozen=True)
class TableSwitch:
    """A reconstructed choice that table builders take as a param: evaluated by rebuilding them.
    The tables taking it are the registered outputs whose declared params hold its config key."""
    key: str  # config key, dotted
    values: tuple  # values tried (the configured one, read from the table's sidecar, is skipped)
    method: str
    fallback: object = None  # the builder's default, for a sidecar written before the param existed
    kind = "tables"

    def _takers(self) -> list[tuple[str, tuple]]:
        """(table, where the key sits in its params) for every table declaring a param above the key."""
        from headgeom.outputs.registry import TABLES  # filled once the paper modules have registered

        parts = tuple(self.key.split("."))
        out = []
        for name, t in TABLES.items():
            for pname, dpath in t.params.items():
                d = tuple(dpath.split("/"))
                if parts[:len(d)] == d:
                    out.append((name, (pname, *parts[len(d):])))
        return out

    @property
    def tables(self) -> tuple:
        """The tables taking the choice."""
        return tuple(n for n, _ in self._takers())

    @property
    def param(self) -> tuple:
        """Where the choice sits in those tables' params."""
        where = {p for _, p in self._takers()}
        if len(where) != 1:
            raise ValueError(f"choice {self.key!r}: the tables taking it place it at {sorted(where)}")
        return where.pop()


@dataclass(frozen=True)
class ShardSwitch:
    """A reconstructed choice of a per-layer analysis job: evaluated by recomputing its shards
    (from stored inputs, with the job's own code) and rebuilding the tables reading them."""
    key: str
    values: tuple
    method: str
    family: str  # shard family recomputed
    job_param: str  # the job's param
    table_param: str | None = None  # the same value as a param of the tables reading the family
    fallback: object = None  # the job's default (no shards: the alternatives are the other values)
    kind = "shards"


@dataclass(frozen=True)
class ForwardSwitch:
    """A reconstructed choice of the forward pass (how windows are cut): evaluated by rerunning the
    forward passes the activation shards were computed from with the alternative (one per model,
    corpus and window shape), then recomputing every activation shard from them and rebuilding
    their tables."""
    key: str  # config key, dotted
    values: tuple
    method: str
    param: str  # the forward job's param
    fallback: object = None
    kind = "forward"


TABLE_SWITCHES = (
    TableSwitch("paper1.band.membership", ("explanation", "strong"),
                "paper 1 left-zero band membership (P_iP_j ≈ P_i both ways, or both heads strong)", "explanation"),
    TableSwitch("paper1.band.explanation", (0.8, 0.85, 0.9, 0.95),
                "paper 1 left-zero band: τ of ≈ (F_ij and F_ji ≥ τ)", 0.9),
)
SHARD_SWITCHES = (
    ShardSwitch("activation.paper1.endpoint", ("pooled", "median_cos2"), "methods §3 natural-return endpoint",
                "activation_natural_return", "endpoint", "endpoint", "pooled"),
    ShardSwitch("activation.read_paths.eps_exact", (True, False), "methods §3 norm epsilon in J(x)",
                "activation_read_paths", "eps_exact", fallback=True),
)
FORWARD_SWITCHES = (
    ForwardSwitch("activation.bos", (True, False), "methods §3 window cutting (BOS prepended to every window)",
                  "bos", True),
)
# the shard families a forward switch recomputes (every family computed from the forward pass)
ACTIVATION_FAMILIES = ("activation_natural_return", "activation_read_paths")


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
