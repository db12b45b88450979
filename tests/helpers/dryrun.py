"""Parsers of a Snakemake dry run (``snakemake -n``): the jobs it lists and their resource requests.
Used by the workflow tests (minimal rebuilds, the plan against Snakemake) and bench/fullwidth.py."""

from __future__ import annotations

import re

_JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\S+):$")


def dry_run_jobs(text: str) -> list[tuple[str, str | None]]:
    """(rule, first output) of every job a dry run lists, sorted."""
    jobs, cur = [], None
    for line in text.splitlines():
        m = _JOB.match(line)
        if m:
            cur = [m.group(1), None]
            jobs.append(cur)
        elif cur is not None and line.startswith("    output: ") and cur[1] is None:
            cur[1] = line[len("    output: "):].split(", ")[0]
    return sorted((r, o) for r, o in jobs)


_RES = re.compile(r"^    resources: (.*)$")


def dry_run_requests(text: str) -> dict[str, dict]:
    """first output -> {rule, output, mem_mb, runtime, cpus_per_task} of every job of a dry run."""
    jobs, cur = {}, None
    for line in text.splitlines():
        m = _JOB.match(line)
        if m:
            cur = {"rule": m.group(1)}
        elif cur is not None and line.startswith("    output: ") and "output" not in cur:
            cur["output"] = line[len("    output: "):].split(", ")[0]
            jobs[cur["output"]] = cur
        elif cur is not None and _RES.match(line):
            res = dict(kv.split("=", 1) for kv in _RES.match(line).group(1).split(", ") if "=" in kv)
            cur.update({k: int(res[k]) for k in ("mem_mb", "runtime", "cpus_per_task") if k in res})
    return jobs
