"""What runs once, when the Snakefile is read: ``start(workflow, config)``.

The command line's execution and DAG settings reach the workflow only after the Snakefile is read,
so the two modes that change what the rule files declare are read here from the command line
(``command_line``): ``--keep-going`` (the load check lists input problems and goes on) and
``--report`` (the outputs' params are those they were built with). Lint mode is Snakemake's own
setting: ``snakemake --lint`` builds its workflow with ``check_envvars=False`` (snakemake.api
``WorkflowApi.lint``; the only caller that does).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CommandLine:
    """The modes of this Snakemake command that the rule files need before its settings exist."""

    keep_going: bool = False
    report: bool = False


def command_line(argv: list[str] | None = None) -> CommandLine:
    """``--keep-going`` / ``-k`` (also within a group of short flags, ``-nk``) and ``--report[=F]``
    in ``argv`` (default: this process's ``sys.argv``)."""
    args = list(sys.argv if argv is None else argv)[1:]
    keep_going = any(a == "--keep-going" or (a[:1] == "-" and a[1:2] != "-" and a[1:].isalpha() and "k" in a)
                     for a in args)
    report = any(a == "--report" or a.startswith("--report=") for a in args)
    return CommandLine(keep_going=keep_going, report=report)


def linting(workflow) -> bool:
    """True under ``snakemake --lint`` (see the module docstring)."""
    return not getattr(workflow, "check_envvars", True)


def reporting(argv: list[str] | None = None) -> bool:
    """True under ``snakemake --report``: each output's params are then those of its provenance."""
    return command_line(argv).report


def wildcard_patterns(config: dict) -> dict[str, str]:
    """The wildcards every stage shares (the Snakefile's global ``wildcard_constraints``): a model
    and a corpus are one of the configured names, the numbered ones digits."""
    return {
        "model": "|".join(re.escape(m) for m in config["models"]),
        "layer": r"\d+",
        "block": r"\d+",
        "part": r"\d+",
        "corpus": "|".join(re.escape(c) for c in config.get("texts", {})) or "NO_CORPUS",
        "nwin": r"\d+",
        "win": r"\d+",
    }


def rebuild_damaged(workflow, config: dict) -> None:
    """Every file of the run that is damaged, is not the file its path asks for, or is missing
    while what is built from it exists (shards, tensor stores, forward passes, sensitivity rows,
    tables and figures and their sidecars) is rebuilt in this run before anything reads it, with
    what is built from it (headgeom.verify.integrity.to_rebuild; one line each). Only the main
    process checks (not --lint)."""
    if workflow.is_main_process and not linting(workflow):
        from headgeom.patches.forcerun import force_rebuild
        from headgeom.verify.integrity import to_rebuild

        force_rebuild(workflow, to_rebuild(config, ".", say=lambda line: print(line, file=sys.stderr)))


def start(workflow, config: dict, argv: list[str] | None = None) -> None:
    """Everything the workflow does once before its rules are declared, in this order:

    0. the plugin jobs named in HEADGEOM_PLUGINS registered (headgeom.schedule.families.load_plugins),
       before a rule file reads the registry;
    1. the config is the one loader's (headgeom.core.config.load_config: config/config.yaml, the
       --configfile files, the --config values typed as a config file types them, renamed keys
       refused), as for ``headgeom`` and headgeom.api;
    2. every config error and every problem of the inputs, one line each, before any job: the
       check ``headgeom check`` prints (1 and 2: headgeom.commands.check.workflow_check);
    3. the config validated against workflow/schemas/config.schema.yaml (its defaults filled in);
    4. damaged, misplaced or missing files marked for rebuilding (``rebuild_damaged``);
    5. the patches of Snakemake's and the SLURM plugin's internals installed (one job array per
       resource request; one pending scheduler timer);
    6. a bare ``--cache`` widened to the cacheable rules (headgeom.rules.fetch.widen_bare_cache);
    7. under ``--report``: the code version recorded for the report's landing page;
    8. the code version handed to the jobs in their environment (computed here once, not in every
       job: headgeom.core.provenance.hand_down_code_version), and this interpreter (HEADGEOM_PYTHON: what the
       per-layer jobs' command runs, headgeom.rules.jobs.job_command)."""
    from snakemake.utils import validate

    from headgeom.core.provenance import code_version, hand_down_code_version
    from headgeom.patches import scheduler_timers, slurm_arrays
    from headgeom.commands.check import workflow_check
    from headgeom.rules.fetch import widen_bare_cache
    from headgeom.schedule.families import load_plugins

    load_plugins()
    cmd = command_line(argv)
    workflow_check(config, workflow, keep_going=cmd.keep_going)
    validate(config, Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml")
    rebuild_damaged(workflow, config)
    slurm_arrays.install()
    scheduler_timers.install()
    widen_bare_cache(workflow)
    if cmd.report:  # the landing page (workflow/report/workflow.rst) names the code it describes
        config["_report_code"] = code_version()
    hand_down_code_version()
    os.environ["HEADGEOM_PYTHON"] = sys.executable  # the per-layer jobs' interpreter (headgeom.rules.jobs.job_command)
