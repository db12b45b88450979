# Sensitivity to the reconstructed choices (the switches and what each can change:
# headgeom.outputs.choices). Every alternative of every switch is a job of its own, writing its row
# (results/sensitivity/<switch>=<value>/row.json; headgeom.verify.sensitivity, the ledger judged on
# the alternative's tables):
#   sensitivity_tables    a table switch (choices:, paper1.band): rebuilds the tables taking it from
#                         the run's shards
#   sensitivity_shards    an activation job's switch: recomputes that shard family from the stored
#                         activations; window cutting: recomputes every activation shard from the
#                         forward passes sensitivity_forward reran (one per model, corpus and windows)
# and the local rule choice_sensitivity puts the rows together (headgeom.publish.choice_sensitivity),
# one per alternative listing the claims whose status changes. The alternatives, their inputs and
# costs: headgeom.rules.sensitivity.
from headgeom import layout
from headgeom.rules.activation import (
    corpus_entry,
    corpus_file,
    forward_resources,
    forward_threads,
    longer_pass,
)
from headgeom.rules.claims import claims_ledger, claims_table_files
from headgeom.rules.fetch import checkpoint_entry
from headgeom.rules.sensitivity import (
    alternative_cost,
    alternative_inputs,
    alternative_kind,
    alternative_pattern,
    alternatives,
    rebuilt_tables,
)

# every alternative of every switch, in the table's row order (alternative id -> what it rebuilds)
CHOICE_ALTS = alternatives(config)


rule sensitivity_tables:
    input:
        unpack(alternative_inputs(workflow, config, CHOICE_ALTS)),
    output:
        row=layout.SENSITIVITY_ROW,
    log:
        layout.SENSITIVITY_LOG,
    wildcard_constraints:
        alt=alternative_pattern(CHOICE_ALTS, "tables"),
    conda:
        "../../envs/headgeom.yaml"
    resources:
        mem_mb=alternative_cost(config, CHOICE_ALTS, "mem_mb"),
        runtime=alternative_cost(config, CHOICE_ALTS, "runtime"),
    params:
        models=list(config["active_models"]),
        tables=rebuilt_tables(config),
        kind=alternative_kind(CHOICE_ALTS),
    script:
        "../scripts/sensitivity_row.py"


rule sensitivity_shards:
    input:
        unpack(alternative_inputs(workflow, config, CHOICE_ALTS)),
    output:
        row=layout.SENSITIVITY_ROW,
        shards=directory(layout.SENSITIVITY_SHARDS),
    log:
        layout.SENSITIVITY_LOG,
    wildcard_constraints:
        alt=alternative_pattern(CHOICE_ALTS, "shards", "forward"),
    conda:
        "../../envs/headgeom.yaml"
    resources:
        mem_mb=alternative_cost(config, CHOICE_ALTS, "mem_mb"),
        runtime=alternative_cost(config, CHOICE_ALTS, "runtime"),
    params:
        models=list(config["active_models"]),
        tables=rebuilt_tables(config),
        kind=alternative_kind(CHOICE_ALTS),
    script:
        "../scripts/sensitivity_row.py"


rule sensitivity_forward:
    input:
        manifest=layout.MANIFEST,
        tensors=layout.TENSORS,
        corpus=corpus_file(config),
        acts=layout.ACTIVATIONS,  # the run's own forward pass: its params, the switch's aside
        source=longer_pass(config),  # the alternative's longer pass whose first windows this one's are, if any
    output:
        directory(layout.SENSITIVITY_ACTIVATIONS),
    log:
        layout.SENSITIVITY_FORWARD_LOG,
    wildcard_constraints:
        alt=alternative_pattern(CHOICE_ALTS, "forward"),
    conda:
        "../../envs/headgeom.yaml"
    threads: forward_threads(config)
    resources:
        **forward_resources(config),
    params:
        # only the keys that locate the checkpoint (as activation_forward)
        entry=checkpoint_entry(config),
        corpus_entry=corpus_entry(config),
    script:
        "../scripts/sensitivity_forward.py"


rule choice_sensitivity:
    input:
        ledger=claims_ledger(workflow, config),
        rows=[layout.sensitivity_row(i) for i in CHOICE_ALTS],
    output:
        **claims_table_files(
            "choice_sensitivity", "../report/table_choice_sensitivity.rst"
        ),
    log:
        layout.output_log("table", "choice_sensitivity"),
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=list(config["active_models"]),
        alternatives=list(CHOICE_ALTS),
    script:
        "../scripts/choice_sensitivity.py"
