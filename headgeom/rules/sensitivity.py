"""The choice-sensitivity jobs (workflow/rules/sensitivity.smk): the alternatives of this config,
one job each (headgeom.publish.choice_sensitivity; the switches: headgeom.outputs.choices), their
wildcard patterns, inputs and cost."""

from __future__ import annotations

import re

from headgeom import layout, targets
from headgeom.rules.claims import claims_ledger, judged_tables, table_csvs
from headgeom.publish import choice_sensitivity


def alternatives(config: dict) -> dict:
    """Every alternative of every switch, in the table's row order (alternative id -> what it rebuilds)."""
    act_models = targets.output_models(config)["activation"]
    return {a.id: a for a in choice_sensitivity.planned(config, targets.built_tables(config), act_models)}


def rebuilt_tables(config: dict) -> list[str]:
    """The tables a switch can change (headgeom.publish.choice_sensitivity.affected_tables) that this config builds."""
    built = targets.built_tables(config)
    return [t for t in choice_sensitivity.affected_tables() if t in built]


def alternative_pattern(alts: dict, *kinds: str) -> str:
    """The wildcard pattern of the alternatives of these kinds (one rule per kind)."""
    ids = [i for i, a in alts.items() if a.kind in kinds]
    return "|".join(re.escape(i) for i in ids) or "NO_ALTERNATIVE"


def alternative_inputs(workflow, config: dict, alts: dict):
    """Input function: the ledger's tables (the claims are judged on them) and the sidecars of the
    tables the alternative rebuilds (which list their shards); for window cutting, its forward passes;
    the shapes behind the cost of recomputing shards (headgeom.publish.choice_sensitivity.alternative_cost)."""
    ledger = claims_ledger(workflow, config)
    tables = table_csvs(judged_tables(config, ledger))
    act_models = targets.output_models(config)["activation"]

    def inner(wc):
        a = alts[wc.alt]
        return {
            "ledger": ledger,
            "tables": tables,
            "provs": [layout.table_files(t)["prov"] for t in a.tables],
            "forwards": [layout.sensitivity_activations(a.id, *f) for f in a.forwards],
            "manifests": [layout.manifest(m) for m in act_models] if a.families and a.tables else [],
        }

    return inner


def alternative_cost(config: dict, alts: dict, key: str):
    """Resource: the alternative job's cost model (headgeom.publish.choice_sensitivity.alternative_cost)."""
    act_models = targets.output_models(config)["activation"]
    return lambda wc, input: choice_sensitivity.alternative_cost(
        alts[wc.alt], dict(zip(act_models, input.manifests)), config)[key]


def alternative_kind(alts: dict):
    """Param: what the alternative rebuilds (tables, shards, forward passes)."""
    return lambda wc: alts[wc.alt].kind
