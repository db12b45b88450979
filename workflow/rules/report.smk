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


rule table_closure_tail:
    input:
        manifests=MANIFESTS,
        shards=layer_shards("closure"),
    output:
        **TABLE_OUT("closure_tail"),
    params:
        models=ACTIVE,
        strong_threshold=lookup(dpath="tables/strong_threshold", within=config),
    log:
        "logs/tables/closure_tail.log",
    script:
        "../scripts/table.py"


rule table_pk_writing:
    input:
        manifests=MANIFESTS,
        shards=layer_shards("pk"),
    output:
        **TABLE_OUT("pk_writing"),
    params:
        models=ACTIVE,
        small_angle_deg=lookup(dpath="tables/small_angle_deg", within=config),
    log:
        "logs/tables/pk_writing.log",
    script:
        "../scripts/table.py"


rule figure_closure_ccdf:
    input:
        manifests=MANIFESTS,
        shards=layer_shards("closure"),
    output:
        **FIGURE_OUT("closure_ccdf"),
    params:
        models=ACTIVE,
        strong_threshold=lookup(dpath="tables/strong_threshold", within=config),
    log:
        "logs/figures/closure_ccdf.log",
    script:
        "../scripts/figure.py"


rule figure_pk_rho_ccdf:
    input:
        manifests=MANIFESTS,
        shards=layer_shards("pk"),
    output:
        **FIGURE_OUT("pk_rho_ccdf"),
    params:
        models=ACTIVE,
        layer=lookup(dpath="figures/pk_rho_layer", within=config),
        kind=lookup(dpath="figures/pk_rho_kind", within=config),
    log:
        "logs/figures/pk_rho_ccdf.log",
    script:
        "../scripts/figure.py"
