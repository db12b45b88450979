# Every table and figure, generated from the output registry (headgeom.outputs):
#   results/tables/<name>.{csv,md,tex,prov.json}    figures/<name>.{png,pdf,prov.json}
# Each rule reads the shard families its entry names, gets the config values its entry names
# as params, and is built by workflow/scripts/output.py; its CSV / PNG carries the entry's
# caption into `snakemake --report` (workflow/report/captions/, written by `headgeom docs`).
# Adding a table or figure is one builder + one registry entry; nothing here changes.
from headgeom import layout
from headgeom.outputs import OUTPUTS
from headgeom.rules.outputs import output_files, output_inputs, output_params

for _out in OUTPUTS.values():

    rule:
        name:
            f"{_out.kind}_{_out.name}"
        input:
            **output_inputs(config, checkpoints, _out),
        output:
            **output_files(_out),
        log:
            layout.output_log(_out.kind, _out.name),
        localrule: True
        conda:
            "../../envs/headgeom.yaml"
        params:
            **output_params(config, _out),
        script:
            "../scripts/output.py"
