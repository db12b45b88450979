"""Audit one reported number: where it came from, and whether it can be made again.

``audit(workdir, table, row, column)`` reads the table's CSV and its provenance sidecar
(``results/tables/<table>.prov.json``) and reports

* the aggregation that made the table (its job function, params, models, code version),
  the Snakemake rule and a command line that rebuilds it;
* every input shard, whether its file still has the sha256 the sidecar recorded, and the
  shards (and rows) that feed the selected row;
* each contributing shard's provenance: job, code version, the config values it was run with,
  its seeds; the rule and command line that rebuild it;
* the tensors those shards were computed from: the store file, where the model came from
  (package + version, repo + revision, or local path, with file sha256s) and every tensor's
  sha256, checked against the store's manifest;

then recomputes the number twice and says whether each matches the table (equal, or within
1e-12 relative):

(a) from the shards: the table's aggregation job is run again on the listed shards, into a
    temporary directory, and the same cell is read back;
(b) from the tensors: the contributing per-layer shards are recomputed from the tensor store
    by their family's job (``headgeom.schedule.families``; every tensor read is checked against its
    manifest sha256), then aggregated the same way.

``audit`` returns the report as data (``AuditReport``; ``report.py``) and prints nothing; the
views render it: ``render_short`` (one screen, what ``headgeom audit`` prints), ``render_full``
(the whole trace, ``--full``), ``render_json`` (``--json``) (``views.py``). The package: ``read``
(the table, its sidecar and row, comparing values), ``rebuild`` (the table and its shards made
again), ``rows`` (the shard rows, config and code behind the number), ``report``, ``views``.

Works for every table of the output registry (``headgeom.outputs.TABLES``): the table is
rebuilt by ``rebuild_table`` (headgeom.outputs.build.build_output) from its sidecar's shards and
params; the choice sensitivity (headgeom.verify.sensitivity) rebuilds tables the same way."""

from headgeom.verify.audit.read import AuditError, cell_eq, compare, inside, load_sidecar, read_csv
from headgeom.verify.audit.rebuild import (Aggregation, activations_dir, aggregation_from_sidecar, rebuild_table,
                                           recompute_shards)
from headgeom.verify.audit.report import AuditReport, audit
from headgeom.verify.audit.views import VIEWS, render, render_full, render_json, render_short

__all__ = ["VIEWS", "Aggregation", "AuditError", "AuditReport", "activations_dir", "aggregation_from_sidecar", "audit",
           "cell_eq", "compare", "inside", "load_sidecar", "read_csv", "rebuild_table", "recompute_shards", "render",
           "render_full", "render_json", "render_short"]
