# Every table and figure, generated from the output registry (headgeom.outputs):
#   results/tables/<name>.{csv,md,tex,prov.json}    figures/<name>.{png,pdf,prov.json}
# Each rule reads the shard families its entry names, gets the config values its entry names
# as params, and is built by workflow/scripts/output.py; its CSV / PNG carries the entry's
# caption into `snakemake --report` (workflow/report/captions/, written by `headgeom docs`).
# Adding a table or figure is one builder + one registry entry; nothing here changes.


for _out in OUTPUTS.values():

    rule:
        name:
            f"{_out.kind}_{_out.name}"
        input:
            **{
                # the activation outputs read closure shards of every layer, whatever a design says
                fam: family_shards(
                    fam,
                    OUTPUT_MODELS[_out.shard_models],
                    by_design=_out.shard_models != "activation",
                )
                for fam in _out.families
            },
            manifests=[
                layout.manifest(m)
                for m in dict.fromkeys(ACTIVE + OUTPUT_MODELS[_out.shard_models])
            ],
        output:
            **OUTPUT_FILES(_out),
        log:
            layout.output_log(_out.kind, _out.name),
        localrule: True
        conda:
            "../../envs/headgeom.yaml"
        params:
            **OUTPUT_PARAMS(_out),
            output=[_out.kind, _out.name],
            models=OUTPUT_BUILDER_MODELS(_out),
        script:
            "../scripts/output.py"
