"""Checking the outputs: tools that read what headgeom.outputs built, never the other way round.

  audit.py            one number down to the tensors, recomputed (``rebuild_table``: a table from its shards)
  sensitivity.py      the claims ledger under every alternative of each reconstructed choice
  claims.py           the claims ledger: the papers' numbers beside the pipeline's
  claims_coverage.py  every number the papers print against the ledger
  summary.py          the end-of-run summary (headline numbers read from the tables)
  docs.py             generated docs: docs/outputs.md, report captions, docs/config.md"""
