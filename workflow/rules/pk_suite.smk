# PK paper suite (cross-layer pairs, null jobs, Tables 1-9, figures).
# Rule files extend ALL_TARGETS (defined in common.smk) with their tables and figures.
