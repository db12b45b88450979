# headgeom: tensors -> per-layer jobs -> Parquet shards -> tables and figures.
# `snakemake -c2` builds everything for config["active_models"]; any single table or
# figure is a target of its own (e.g. `snakemake -c2 results/tables/p1_table2_strong_tail.csv`).
#
# One rule file per stage (workflow/rules/); each imports what it uses by name from
# headgeom.rules and reads no name another rule file or this file defines
# (tests/unit/rules/test_rule_files.py).
import sys
import time
from pathlib import Path

from snakemake.utils import min_version

from headgeom import layout, targets
from headgeom.rules import jobserver as job_server
from headgeom.rules.start import start, wildcard_patterns

min_version("9.0")


configfile: Path(workflow.basedir) / "config" / "config.yaml"


# the report's landing page: what the run is and where its outputs are
report: "workflow/report/workflow.rst"


# Once, before any rule: every config error and every problem of the inputs, one line each, before
# any job (the check `headgeom check` prints: headgeom.commands.check); the config validated
# against workflow/schemas/config.schema.yaml; damaged, misplaced or missing files marked for rebuilding; the patches of
# Snakemake's and the SLURM plugin's internals; the --cache and --report modes (headgeom.rules.start).
start(workflow, config)


# the wildcards every stage shares: a model or corpus is a configured name, the numbered ones digits
wildcard_constraints:
    **wildcard_patterns(config),


include: "workflow/rules/fetch.smk"
include: "workflow/rules/jobs.smk"
include: "workflow/rules/outputs.smk"
include: "workflow/rules/activation.smk"
include: "workflow/rules/claims.smk"
include: "workflow/rules/sensitivity.smk"
include: "workflow/rules/summary.smk"


localrules:
    all,


rule all:
    default_target: True
    input:
        targets.all_targets(config),


# The end-of-run summary on the console, when this run (re)built it.
RUN_STARTED = time.time()


# A local run forks its jobs from one process that has their libraries imported
# (headgeom.rules.jobserver; HEADGEOM_NO_JOB_SERVER=1: each job in its own process).
onstart:
    job_server.start(workflow, say=lambda line: print(line, file=sys.stderr))


onsuccess:
    job_server.stop()
    summary = Path(layout.SUMMARY)
    if summary.is_file() and summary.stat().st_mtime >= RUN_STARTED:
        print(f"\n{summary.read_text(encoding='utf-8')}")


# A failed run ends with each failed job's own one-line error (its log's `headgeom error:` line,
# headgeom/core/logs.py), not only Snakemake's "check log file(s)".
onerror:
    from headgeom.core.logs import end_of_run_errors

    job_server.stop()
    lines = end_of_run_errors(log, layout.LOGS_DIR, since=RUN_STARTED)
    if lines:
        print(
            "\nheadgeom: failed jobs (rule (wildcards): error  [log]):",
            file=sys.stderr,
        )
        for line in lines:
            print(f"  {line}", file=sys.stderr)
