"""Checking the outputs: tools that read what headgeom.outputs built, never the other way round.

  audit/             one number down to the tensors, recomputed (``rebuild_table``: a table from its shards)
  sensitivity.py      the claims ledger under every alternative of each reconstructed choice
  claims.py           the claims ledger: the papers' numbers beside the pipeline's
  claims_coverage.py  every number the papers print against the ledger
  claim_audit.py      headgeom audit --claim: the cells a ledger entry reads, each audited
  ledger_page.py      results/tables/claims.html: the ledger as a filterable page (vendor/tabulator)
  macros.py           the ledger and named table cells as LaTeX macros
  diff.py             headgeom diff: what moved between two runs (tables, ledger, figures, shards)
  integrity.py        headgeom verify: every file of a results tree against its content record
  spot_check.py       headgeom verify --recompute K: a seeded sample of shards recomputed from the tensors
  summary.py          the end-of-run summary (headline numbers read from the tables)
  docs.py             generated docs: docs/outputs.md, report captions, docs/config.md"""
