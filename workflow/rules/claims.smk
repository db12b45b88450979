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


# The pipeline's numbers as LaTeX macros (headgeom.verify.macros), for a manuscript whose build
# depends on them: the ledger's entries (value at the paper's precision, verdict) and the table
# cells claims.macros names. Each file records the code version and the sha256 of the config of
# the run that wrote it (not a param: a config edit that moves no macro reruns nothing here).
#   results/tables/claims_macros.tex, results/tables/cell_macros.tex
CELL_MACROS = config.get("claims", {}).get("macros", [])


rule macros:
    input:
        ledger=CLAIMS_LEDGER,
        claims=_CLAIMS_FILES["csv"],
        tables=[layout.table_files(t)["csv"] for t in CLAIMS_TABLES]
        + [layout.table_files(m["table"])["csv"] for m in CELL_MACROS],
    output:
        **layout.MACROS,
    log:
        layout.output_log("table", "macros"),
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=ACTIVE,
        cells=CELL_MACROS,
    script:
        "../scripts/macros.py"


# Sensitivity to the reconstructed choices (headgeom.verify.sensitivity; the switches and what each
# can change: headgeom.outputs.choices). Every alternative of every switch is a job of its own,
# writing its row (results/sensitivity/<switch>=<value>/row.json):
#   sensitivity_tables    a table switch (choices:, paper1.band): rebuilds the tables taking it from
#                         the run's shards
#   sensitivity_shards    an activation job's switch: recomputes that shard family from the stored
#                         activations; window cutting: recomputes every activation shard from the
#                         forward passes sensitivity_forward reran (one per model, corpus and windows)
# and the local rule choice_sensitivity puts the rows together, one per alternative listing the
# claims whose status changes. The alternatives and their inputs: workflow/rules/sensitivity_common.smk.
CHOICE_TABLES = [t for t in _sens.affected_tables() if t in _BUILT_TABLES]
_CHOICE_FILES = layout.table_files("choice_sensitivity")


rule sensitivity_tables:
    input:
        unpack(_alt_inputs),
    output:
        row=layout.SENSITIVITY_ROW,
    log:
        layout.SENSITIVITY_LOG,
    wildcard_constraints:
        alt=_alt_re("tables"),
    conda:
        "../../envs/headgeom.yaml"
    resources:
        mem_mb=lambda wc, input: _alt_res(wc, input, "mem_mb"),
        runtime=lambda wc, input: _alt_res(wc, input, "runtime"),
    params:
        models=ACTIVE,
        tables=CHOICE_TABLES,
        kind=lambda wc: CHOICE_ALTS[wc.alt].kind,
    script:
        "../scripts/choice_sensitivity.py"


rule sensitivity_shards:
    input:
        unpack(_alt_inputs),
    output:
        row=layout.SENSITIVITY_ROW,
        shards=directory(layout.SENSITIVITY_SHARDS),
    log:
        layout.SENSITIVITY_LOG,
    wildcard_constraints:
        alt=_alt_re("shards", "forward"),
    conda:
        "../../envs/headgeom.yaml"
    resources:
        mem_mb=lambda wc, input: _alt_res(wc, input, "mem_mb"),
        runtime=lambda wc, input: _alt_res(wc, input, "runtime"),
    params:
        models=ACTIVE,
        tables=CHOICE_TABLES,
        kind=lambda wc: CHOICE_ALTS[wc.alt].kind,
    script:
        "../scripts/choice_sensitivity.py"


rule sensitivity_forward:
    input:
        manifest=layout.MANIFEST,
        tensors=layout.TENSORS,
        corpus=_act_corpus_file,
        acts=layout.ACTIVATIONS,  # the run's own forward pass: its params, the switch's aside
        source=_act_source,  # the alternative's longer pass whose first windows this one's are, if any
    output:
        directory(layout.SENSITIVITY_ACTIVATIONS),
    log:
        layout.SENSITIVITY_FORWARD_LOG,
    wildcard_constraints:
        alt=_alt_re("forward"),
    conda:
        "../../envs/headgeom.yaml"
    threads: ACT_THREADS
    resources:
        mem_mb=lambda wc, input: _act_fwd_res(wc, input, "mem_mb"),
        runtime=lambda wc, input: _act_fwd_res(wc, input, "runtime"),
        cpus_per_task=ACT_THREADS,
        gpu=_act_fwd_gpus,
    params:
        # only the keys that locate the checkpoint (as activation_forward)
        entry=lambda wc: {
            k: v for k, v in config["models"][wc.model].items() if k in FETCH_KEYS
        },
        corpus_entry=lambda wc: config["texts"][wc.corpus],
    script:
        "../scripts/sensitivity_forward.py"


rule choice_sensitivity:
    input:
        ledger=CLAIMS_LEDGER,
        rows=[layout.sensitivity_row(i) for i in CHOICE_ALTS],
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
    params:
        models=ACTIVE,
        alternatives=list(CHOICE_ALTS),
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
