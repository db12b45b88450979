"""What a run publishes beyond the output registry's tables and figures: the files a reader or a
manuscript takes the pipeline's numbers from, each made from the tables the run built
(headgeom.outputs); the checks of them are in headgeom.verify, which imports this package, never
the reverse.

  claims.py              the claims ledger (config/claims.yaml) read and judged: results/tables/claims.*
  claim_forms.py         the forms a ledger value is written in, the rule judging each, the reducers
  claims_derive.py       numbers the papers derive from their settings or a format (derive: entries)
  ledger_cells.py        the cells a ledger entry reads, each named by unique row filters
  ledger_page.py         results/tables/claims.html: the ledger as a filterable page (vendor/tabulator)
  macros.py              the ledger and named table cells as LaTeX macros
  summary.py             the end-of-run summary, results/summary.md (headline numbers read from the tables)
  choice_sensitivity.py  the alternatives of each reconstructed choice, their cost, and the table of their rows
  docs.py                generated docs: docs/outputs.md, report captions, docs/config.md"""
