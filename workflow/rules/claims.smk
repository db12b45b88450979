# Claims ledger: every number the two papers report (config/claims.yaml, or claims.ledger in the
# config) beside the pipeline's value where that model has been run; "not run" for the rest.
#   results/tables/claims.{csv,md,tex,prov.json}
# Reads the CSVs of the tables the ledger names (those this workflow builds), so it reruns when
# any of them, the ledger or the active models change.
from headgeom.reports.claims import (
    ledger_tables as _ledger_tables,
    load_ledger as _load_ledger,
)

CLAIMS_LEDGER = str(
    Path(config["claims"]["ledger"])
    if config.get("claims", {}).get("ledger")
    else Path(workflow.basedir) / "config" / "claims.yaml"
)
_BUILT_TABLES = {
    Path(t).stem
    for t in ALL_TARGETS
    if t.startswith("results/tables/") and t.endswith(".csv")
}
CLAIMS_TABLES = [
    t for t in _ledger_tables(_load_ledger(CLAIMS_LEDGER)) if t in _BUILT_TABLES
]


rule claims:
    input:
        ledger=CLAIMS_LEDGER,
        tables=[f"results/tables/{t}.csv" for t in CLAIMS_TABLES],
    output:
        csv=report(
            "results/tables/claims.csv",
            caption="../report/table_claims.rst",
            category="Claims",
            subcategory="Tables",
            labels={"name": "claims", "kind": "table"},
        ),
        md="results/tables/claims.md",
        tex="results/tables/claims.tex",
        prov="results/tables/claims.prov.json",
    log:
        "logs/tables/claims.log",
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=ACTIVE,
    script:
        "../scripts/claims.py"


ALL_TARGETS += [
    f"results/tables/claims.{ext}" for ext in ("csv", "md", "tex", "prov.json")
]
