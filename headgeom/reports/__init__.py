"""Shards -> tables and figures: table/figure writers, the two papers' reports, the claims
ledger and audit."""
