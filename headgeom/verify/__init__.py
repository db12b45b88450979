"""Checking the outputs: tools that read what headgeom.outputs and headgeom.publish built, never the
other way round.

  audit/             one number down to the tensors, recomputed (``rebuild_table``: a table from its shards)
  claim_audit.py     headgeom audit --claim: the cells a ledger entry reads, each audited
  claims_coverage.py every number the papers print against the ledger
  sensitivity.py     the ledger judged under one alternative of a reconstructed choice (a row of the
                     choice-sensitivity table, headgeom.publish.choice_sensitivity)
  diff.py            headgeom diff: what moved between two runs (tables, ledger, figures, shards)
  expected.py        every file a config's DAG makes
  integrity.py       headgeom verify: every file of a results tree against its content record
  spot_check.py      headgeom verify --recompute K: a seeded sample of shards recomputed from the tensors"""
