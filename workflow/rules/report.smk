TABLE_OUT = lambda t: {
    "csv": f"results/tables/{t}.csv",
    "md": f"results/tables/{t}.md",
    "tex": f"results/tables/{t}.tex",
    "prov": f"results/tables/{t}.prov.json",
}
FIGURE_OUT = lambda f: {
    "png": f"figures/{f}.png",
    "pdf": f"figures/{f}.pdf",
    "prov": f"figures/{f}.prov.json",
}


# The same outputs with the table's CSV / the figure's PNG marked for `snakemake --report`,
# captioned by workflow/report/table_<name>.rst / figure_<name>.rst (Jinja: snakemake.params,
# snakemake.config are available there; while a table has no caption of its own the generic one
# is used, and tests/test_audit.py fails). Use these in a rule's output:
#     output: **TABLE_REPORT(name, "PK paper")      output: **FIGURE_REPORT(name, "PK paper")
# ALL_TARGETS keeps the plain paths of TABLE_OUT / FIGURE_OUT. (Lambdas, not defs: snakemake --lint.)
REPORT_CAPTION = lambda kind, name: (
    f"../report/{kind}_{name}.rst"
    if (Path(workflow.basedir) / "workflow" / "report" / f"{kind}_{name}.rst").exists()
    else f"../report/{kind}_generic.rst"
)
TABLE_REPORT = lambda t, category: {
    **TABLE_OUT(t),
    "csv": report(
        TABLE_OUT(t)["csv"],
        caption=REPORT_CAPTION("table", t),
        category=category,
        subcategory="Tables",
        labels={"name": t, "kind": "table"},
    ),
}
FIGURE_REPORT = lambda f, category: {
    **FIGURE_OUT(f),
    "png": report(
        FIGURE_OUT(f)["png"],
        caption=REPORT_CAPTION("figure", f),
        category=category,
        subcategory="Figures",
        labels={"name": f, "kind": "figure"},
    ),
}


rule table_closure_tail:
    input:
        manifests=MANIFESTS,
        shards=layer_shards("closure"),
    output:
        **TABLE_REPORT("closure_tail", "Paper 1"),
    log:
        "logs/tables/closure_tail.log",
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=ACTIVE,
        strong_threshold=lookup(dpath="tables/strong_threshold", within=config),
    script:
        "../scripts/report.py"


rule table_pk_writing:
    input:
        manifests=MANIFESTS,
        shards=layer_shards("pk"),
    output:
        **TABLE_REPORT("pk_writing", "PK paper"),
    log:
        "logs/tables/pk_writing.log",
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=ACTIVE,
        small_angle_deg=lookup(dpath="tables/small_angle_deg", within=config),
    script:
        "../scripts/report.py"


rule figure_closure_ccdf:
    input:
        manifests=MANIFESTS,
        shards=layer_shards("closure"),
    output:
        **FIGURE_REPORT("closure_ccdf", "Paper 1"),
    log:
        "logs/figures/closure_ccdf.log",
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=ACTIVE,
        strong_threshold=lookup(dpath="tables/strong_threshold", within=config),
    script:
        "../scripts/report.py"


rule figure_pk_rho_ccdf:
    input:
        manifests=MANIFESTS,
        shards=layer_shards("pk"),
    output:
        **FIGURE_REPORT("pk_rho_ccdf", "PK paper"),
    log:
        "logs/figures/pk_rho_ccdf.log",
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=ACTIVE,
        layer=lookup(dpath="figures/pk_rho_layer", within=config),
        kind=lookup(dpath="figures/pk_rho_kind", within=config),
    script:
        "../scripts/report.py"
