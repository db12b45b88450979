# headgeom: tensors -> per-layer jobs -> Parquet shards -> tables and figures.
# `snakemake -c2` builds everything for config["active_models"]; any single table or
# figure is a target of its own (e.g. `snakemake -c2 results/tables/p1_table2_strong_tail.csv`).
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: Path(workflow.basedir) / "config" / "config.yaml"


# the report's landing page: what the run is and where its outputs are
report: "workflow/report/workflow.rst"


from headgeom.core.config import typed_cli_config
from headgeom.tools.check import workflow_check

# --config values nested in {...} / [...] arrive as strings: typed as a config file types them
typed_cli_config(config, workflow.config_settings.config)
# every config error (schema, registries, layers against each model's shape) and every problem of
# the inputs, one line each, before any job: the check `headgeom check` prints (headgeom.tools.check)
workflow_check(config, workflow, sys.argv)
validate(config, Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/paper1_common.smk"
include: "workflow/rules/pk_suite_common.smk"
include: "workflow/rules/activation_common.smk"
include: "workflow/rules/sensitivity_common.smk"
include: "workflow/rules/fetch.smk"
include: "workflow/rules/jobs.smk"
include: "workflow/rules/outputs.smk"
include: "workflow/rules/activation.smk"
include: "workflow/rules/claims.smk"


localrules:
    all,


rule all:
    default_target: True
    input:
        targets.all_targets(config),


# The end-of-run summary on the console, when this run (re)built it.
import time as _time

_RUN_STARTED = _time.time()


onsuccess:
    _summary = Path(layout.SUMMARY)
    if _summary.is_file() and _summary.stat().st_mtime >= _RUN_STARTED:
        print(f"\n{_summary.read_text(encoding='utf-8')}")


# A failed run ends with each failed job's own one-line error (its log's `headgeom error:` line,
# headgeom/jobs/logs.py), not only Snakemake's "check log file(s)".
onerror:
    from headgeom.jobs.logs import end_of_run_errors as _end_errors

    _lines = _end_errors(log, layout.LOGS_DIR, since=_RUN_STARTED)
    if _lines:
        print(
            "\nheadgeom: failed jobs (rule (wildcards): error  [log]):",
            file=sys.stderr,
        )
        for _line in _lines:
            print(f"  {_line}", file=sys.stderr)
