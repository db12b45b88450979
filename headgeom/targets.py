"""What a run builds: the models each output covers and every target of ``snakemake all``,
computed from the config and the registries in one place (the Snakefile's ``rule all``, the
output rules and the claims rules call these)."""

from __future__ import annotations

from headgeom import layout
from headgeom.core.errors import ConfigError
from headgeom.schedule import designs
from headgeom.schedule.families import activation_models
from headgeom.core.config import shared_lineage_members
from headgeom.outputs import OUTPUTS

# the tables the claims rules write themselves (workflow/rules/claims.smk, sensitivity.smk), in build order
CLAIMS_TABLES = ("claims", "choice_sensitivity")


def lineages(config: dict) -> tuple[dict, dict]:
    """paper1.lineages (name -> [checkpoint model, ..., final model]) and model -> its lineage;
    every name must be a configured model and belong to at most one lineage."""
    named = config["paper1"].get("lineages") or {}
    for name, members in named.items():
        unknown = [m for m in members if m not in config["models"]]
        if unknown:
            raise ConfigError(f"config: paper1.lineages.{name} names {unknown}, which are not under models: "
                             f"(known: {sorted(config['models'])})")
    shared = shared_lineage_members(config)
    if shared:
        raise ConfigError(shared[0])
    return named, {m: name for name, members in named.items() for m in members}


def final_model(config: dict, model: str) -> str:
    """The checkpoint whose closure fixes a model's capacity groups (its lineage's last; else itself)."""
    named, owner = lineages(config)
    return named[owner[model]][-1] if model in owner else model


def output_models(config: dict) -> dict[str, list[str]]:
    """Whose shards an output reads (headgeom.outputs.Output.shard_models / builder_models):
    the active models; the lineages' checkpoints (Table 3; without lineages, each active model
    is a one-checkpoint lineage); the models the activation stage runs for."""
    active = list(config["active_models"])
    named, _ = lineages(config)
    return {"active": active, "lineages": [m for members in named.values() for m in members] or active,
            "activation": activation_models(config)}


def builder_models(out, config: dict) -> list[str]:
    """The models an output's builder covers: the active models whose design runs its paper's
    stage (headgeom.schedule.designs), or (activation, lineage outputs) the models of that kind."""
    if out.builder_models == "active":
        return designs.stage_models(config, config["active_models"], "pk" if out.paper == "PK paper" else "paper1")
    return output_models(config)[out.builder_models]


def base_instruct_pairs(config: dict) -> list[tuple[str, str]]:
    """Declared base/instruct pairs (models[x].pair = y) with both sides active and running
    the PK stage (headgeom.schedule.designs)."""
    pk_models = designs.stage_models(config, list(config["active_models"]), "pk")
    return sorted({tuple(sorted((m, config["models"][m]["pair"])))
                   for m in pk_models if config["models"][m].get("pair") in pk_models})


def output_targets(config: dict) -> list[str]:
    """Every file of the tables and figures this config builds (an output none of whose models
    runs its stage, or whose activation stage is off, is not built)."""
    return [p for out in OUTPUTS.values() if builder_models(out, config) for p in out.paths().values()]


def built_tables(config: dict) -> set[str]:
    """The names of the registry tables this config builds."""
    csv = f"{layout.TABLES_DIR}/"
    return {t[len(csv):-len(".csv")] for t in output_targets(config) if t.startswith(csv) and t.endswith(".csv")}


def all_targets(config: dict) -> list[str]:
    """The targets of ``rule all``: every output, the claims tables, the macros and the run summary."""
    return (output_targets(config) + [p for t in CLAIMS_TABLES for p in layout.table_files(t).values()]
            + list(layout.MACROS.values()) + [layout.SUMMARY])
