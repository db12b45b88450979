# Claims ledger: every number the two papers report (config/claims.yaml, or claims.ledger in the
# config) beside the pipeline's value where that model has been run; "not run" for the rest.
#   results/tables/claims.{csv,md,tex,prov.json}
# Reads the CSVs of the tables the ledger names (those this workflow builds), so it reruns when
# any of them, the ledger or the active models change.
from headgeom.verify.claims import (
    ledger_tables as _ledger_tables,
    load_ledger as _load_ledger,
)

# Relative to the work directory where it lies inside it, so that a copied run directory (with
# the workflow in it) finds its jobs up to date and its provenance names no absolute path.
CLAIMS_LEDGER = within_workdir(
    Path(config["claims"]["ledger"])
    if config.get("claims", {}).get("ledger")
    else Path(workflow.basedir) / "config" / "claims.yaml"
)
_BUILT_TABLES = targets.built_tables(config)
CLAIMS_TABLES = [
    t for t in _ledger_tables(_load_ledger(CLAIMS_LEDGER)) if t in _BUILT_TABLES
]

_CLAIMS_FILES = layout.table_files("claims")


rule claims:
    input:
        ledger=CLAIMS_LEDGER,
        tables=[layout.table_files(t)["csv"] for t in CLAIMS_TABLES],
    output:
        csv=_CLAIMS_FILES["csv"],
        html=report(
            _CLAIMS_FILES["html"],
            caption="../report/table_claims.rst",
            category="Claims",
            subcategory="Tables",
            labels={"name": "claims", "kind": "table"},
        ),
        md=_CLAIMS_FILES["md"],
        tex=_CLAIMS_FILES["tex"],
        prov=_CLAIMS_FILES["prov"],
    log:
        layout.output_log("table", "claims"),
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=ACTIVE,
    script:
        "../scripts/claims.py"


# Sensitivity to the reconstructed choices (headgeom.verify.sensitivity): each alternative of each
# `choices:` switch rebuilds the tables reading the paper 1 per-head shards (from the shards
# their sidecars list) and re-reads the ledger; one row per alternative lists the claims whose
# status changes.
from headgeom.verify.sensitivity import affected_tables as _choice_tables

CHOICE_TABLES = [t for t in _choice_tables() if t in _BUILT_TABLES]

_CHOICE_FILES = layout.table_files("choice_sensitivity")


rule choice_sensitivity:
    input:
        ledger=CLAIMS_LEDGER,
        tables=[layout.table_files(t)["csv"] for t in CLAIMS_TABLES],
        provs=[layout.table_files(t)["prov"] for t in CHOICE_TABLES],
    output:
        csv=_CHOICE_FILES["csv"],
        html=report(
            _CHOICE_FILES["html"],
            caption="../report/table_choice_sensitivity.rst",
            category="Claims",
            subcategory="Tables",
            labels={"name": "choice_sensitivity", "kind": "table"},
        ),
        md=_CHOICE_FILES["md"],
        tex=_CHOICE_FILES["tex"],
        prov=_CHOICE_FILES["prov"],
    log:
        layout.output_log("table", "choice_sensitivity"),
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    threads: 2  # the alternatives are independent: evaluated in parallel (the run's serial tail)
    params:
        models=ACTIVE,
        # the tables this run builds: one left by an earlier run of other models is not rebuilt
        tables=CHOICE_TABLES,
        # the forward-pass switch (activation.bos) reruns forward passes: model and corpus entries
        # (only the keys that locate each checkpoint: editing a model's notes reruns nothing)
        model_entries=lambda wc: {
            m: {k: v for k, v in config["models"][m].items() if k in FETCH_KEYS}
            for m in ACT_MODELS
        },
        texts=lookup(dpath="texts", within=config, default={}),
    script:
        "../scripts/choice_sensitivity.py"


# The end-of-run summary (headgeom.verify.summary): per model the headline numbers, each with
# its table and column, and where the outputs are; printed on the console when a run succeeds.
from headgeom.verify.summary import tables_read as _summary_tables

SUMMARY_TABLES = [t for t in _summary_tables() if t in _BUILT_TABLES or t == "claims"]


rule summary:
    input:
        tables=[layout.table_files(t)["csv"] for t in SUMMARY_TABLES],
    output:
        md=layout.SUMMARY,
    log:
        layout.output_log("table", "summary"),
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=ACTIVE,
    script:
        "../scripts/summary.py"
