# The end-of-run summary (headgeom.publish.summary): per model the headline numbers, each with
# its table and column, and where the outputs are; printed on the console when a run succeeds.
#   results/summary.md
from headgeom import layout
from headgeom.rules.claims import summary_tables, table_csvs


rule summary:
    input:
        tables=table_csvs(summary_tables(config)),
    output:
        md=layout.SUMMARY,
    log:
        layout.output_log("table", "summary"),
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=list(config["active_models"]),
    script:
        "../scripts/summary.py"
