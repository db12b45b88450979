# Claims ledger: every number the two papers report (config/claims.yaml, or claims.ledger in the
# config) beside the pipeline's value where that model has been run; "not run" for the rest.
#   results/tables/claims.{csv,md,tex,prov.json}
# Reads the CSVs of the tables the ledger names (those this workflow builds), so it reruns when
# any of them, the ledger or the active models change.
from headgeom import layout
from headgeom.rules.claims import (
    cell_macros,
    claims_ledger,
    claims_table_files,
    judged_tables,
    table_csvs,
)

CLAIMS_LEDGER = claims_ledger(workflow, config)
CLAIMS_JUDGED_CSVS = table_csvs(judged_tables(config, CLAIMS_LEDGER))
CLAIMS_FILES = claims_table_files("claims", "../report/table_claims.rst")


rule claims:
    input:
        ledger=CLAIMS_LEDGER,
        tables=CLAIMS_JUDGED_CSVS,
    output:
        **CLAIMS_FILES,
    log:
        layout.output_log("table", "claims"),
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=list(config["active_models"]),
    script:
        "../scripts/claims.py"


# The pipeline's numbers as LaTeX macros (headgeom.publish.macros), for a manuscript whose build
# depends on them: the ledger's entries (value at the paper's precision, verdict) and the table
# cells claims.macros names. Each file records the code version and the sha256 of the config of
# the run that wrote it (not a param: a config edit that moves no macro reruns nothing here).
#   results/tables/claims_macros.tex, results/tables/cell_macros.tex
rule macros:
    input:
        ledger=CLAIMS_LEDGER,
        claims=CLAIMS_FILES["csv"],
        tables=CLAIMS_JUDGED_CSVS + table_csvs(m["table"] for m in cell_macros(config)),
    output:
        **layout.MACROS,
    log:
        layout.output_log("table", "macros"),
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=list(config["active_models"]),
        cells=cell_macros(config),
    script:
        "../scripts/macros.py"
