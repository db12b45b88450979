"""Switches for the reconstructed choices of METHODS (*(choice)*; issue 13, item 5) and the
sensitivity table: for each switch and each alternative, which ledger claims change status.

Weight-space choices of paper 1 are computed every way in the ``paper1_heads`` shards (extra
columns) and picked at the tables by config ``choices:`` (the tables reading those shards get it
as a param), so switching reruns tables, never shards, and the default reproduces the earlier
numbers exactly:

  choices.return_gain         rms      g_T = ||T^2||_F / ||T||_F (RMS gain of T on its own outputs)
                              fitted   |alpha*| = |<T^2,T>| / ||T||^2 (the fitted scale's magnitude)
  choices.isotropy            participation  I_D = (tr D)^2 / (d tr D^2)
                              min_max        min_i D_i / max_i D_i (column I_D_minmax)
  choices.factorial_contrast  interaction    double-centred S[h,h] - row - column + rest
                              row            S[h,h] - mean_{j!=h} S[h,j] (own K, other donors' D)
                              column         S[h,h] - mean_{i!=h} S[i,h] (own D, other donors' K)

The activation stage's choices are config switches of their own that rerun forward passes
(``activation.paper1.endpoint``: pooled / median_cos2; ``activation.read_paths.eps_exact``); the
sensitivity table lists them as not evaluated (it rebuilds tables from existing shards only).

``sensitivity(workdir, ledger, models)`` rebuilds, for every alternative, the tables that read
the switched columns from the shards their provenance sidecars list (headgeom.reports.audit),
beside copies of every other table, evaluates the ledger on both sets (headgeom.reports.claims)
and reports each claim whose status differs."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from headgeom.core.errors import ConfigError
from headgeom.reports.tables import Column, Table


@dataclass(frozen=True)
class Switch:
    key: str  # under config `choices:`
    default: str
    alternatives: tuple  # every value, default first
    method: str  # where METHODS makes the choice
    columns: tuple  # paper1_heads columns it replaces


SWITCHES = (
    Switch("return_gain", "rms", ("rms", "fitted"), "METHODS §1 return gain g_T", ("g_T",)),
    Switch("isotropy", "participation", ("participation", "min_max"), "METHODS §1 isotropy I_D", ("I_D",)),
    Switch("factorial_contrast", "interaction", ("interaction", "row", "column"),
           "METHODS §1 factorial D x K contrast", ("I_factorial", "I_factorial_ctrl")),
)
DEFAULTS = {s.key: s.default for s in SWITCHES}
# choices elsewhere that need a rerun of another stage (listed, not evaluated here)
OTHER_SWITCHES = (
    ("activation.paper1.endpoint", "pooled", ("median_cos2",), "METHODS §3 natural-return endpoint"),
    ("activation.read_paths.eps_exact", "true", ("false",), "METHODS §3 norm epsilon in J(x)"),
)


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


# ------------------------------------------------------------------ sensitivity


def affected_tables() -> list[str]:
    """Tables whose builder reads the paper1_heads shards (and so the switched columns)."""
    from headgeom.reports.outputs import TABLES

    return [n for n, o in TABLES.items() if "paper1_heads" in o.families]


def _rebuild(workdir: Path, tables_dir: Path, out_dir: Path, name: str, choices: dict) -> bool:
    from headgeom.reports import audit

    prov = tables_dir / f"{name}.prov.json"
    if not prov.exists():
        return False
    sidecar = audit.load_sidecar(prov, workdir)
    _, rows = audit.read_csv(tables_dir / f"{name}.csv")
    agg = audit.aggregation_from_sidecar(name, sidecar, rows)
    agg = replace(agg, params={**agg.params, "choices": choices})
    audit.run_aggregation(agg, workdir, workdir, out_dir)
    return True


def sensitivity(workdir, ledger: list[dict], models_run: list[str], tables_dir=None) -> Table:
    from headgeom.reports.claims import build_rows

    workdir = Path(workdir)
    tables_dir = Path(tables_dir or workdir / "results" / "tables")
    base = {r["id"]: r for r in build_rows(ledger, tables_dir, models_run)[0]}
    names = affected_tables()
    rows = []
    for sw in SWITCHES:
        for alt in sw.alternatives[1:]:
            with tempfile.TemporaryDirectory(prefix="headgeom-choices-") as tmp:
                tmp = Path(tmp)
                for f in tables_dir.iterdir():
                    if f.suffix in (".csv", ".md") and f.is_file():
                        shutil.copyfile(f, tmp / f.name)
                built = [n for n in names if _rebuild(workdir, tables_dir, tmp, n, {**DEFAULTS, sw.key: alt})]
                alt_rows = {r["id"]: r for r in build_rows(ledger, tmp, models_run)[0]}
            read = [i for i, r in base.items() if r["read"].split("[")[0].split(":")[0] in built]
            judged = [i for i in read if base[i]["status"] in ("agrees", "differs")]
            changed = [i for i in base if i in alt_rows and alt_rows[i]["status"] != base[i]["status"]]
            rows.append({
                "switch": f"choices.{sw.key}", "default": sw.default, "alternative": alt, "where": sw.method,
                "tables": len(built), "claims_read": len(read), "claims_judged": len(judged), "changed": len(changed),
                "claims": "; ".join(f"{i}: {base[i]['status']} → {alt_rows[i]['status']} "
                                    f"({base[i]['pipeline']} → {alt_rows[i]['pipeline']})" for i in changed) or "none",
            })
    for key, default, alts, where in OTHER_SWITCHES:
        for alt in alts:
            rows.append({"switch": key, "default": default, "alternative": alt, "where": where, "tables": 0,
                         "claims_read": None, "claims_judged": None, "changed": None,
                         "claims": "not evaluated: needs the activation stage rerun with the switch"})
    return Table("choice_sensitivity",
                 "For each switch of a reconstructed choice and each alternative: the tables rebuilt, the ledger claims "
                 "they feed, and every claim whose status changes (status and pipeline value, default → alternative).",
                 [Column("switch", "Switch"), Column("default", "Default"), Column("alternative", "Alternative"),
                  Column("where", "Choice"), Column("tables", "Tables rebuilt"), Column("claims_read", "Claims read"),
                  Column("claims_judged", "of them agreeing or differing"),
                  Column("changed", "Claims changing status"), Column("claims", "Changes")], rows,
                 notes=f"Run models: {', '.join(models_run) or 'none'}. Tables are rebuilt from the shards their "
                       "provenance lists; defaults are the pipeline's (config choices:).")


def sensitivity_job(ledger_path, workdir, models_run: list[str], outputs: dict) -> Table:
    from headgeom.core.provenance import code_version
    from headgeom.io.files import sha256_file, write_set
    from headgeom.reports.claims import load_ledger

    t = sensitivity(workdir, load_ledger(ledger_path), models_run)
    write_set(outputs, {"csv": t.csv(), "md": t.markdown(), "tex": t.latex()}, {
        "table": t.name, "aggregation": "headgeom.reports.choices.sensitivity",
        "params": {"models": list(models_run), "switches": {s.key: list(s.alternatives) for s in SWITCHES}},
        "code": code_version(), "columns": [c.key for c in t.columns],
        "ledger": {"path": str(ledger_path), "sha256": sha256_file(ledger_path)},
        "inputs": [],
    })
    return t
