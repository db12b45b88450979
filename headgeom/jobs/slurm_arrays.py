"""SLURM job arrays that keep every task's own resource request.

snakemake-executor-plugin-slurm 2.8.0 submits the ready jobs of an array-enabled rule as one
``sbatch --array`` call built from the *first* job's resources ("all jobs have the same resource
requirement", ``Executor.run_array_jobs``). Our per-layer jobs do not share one request: models
of different shapes, fan-out parts of different sizes and retries (attempt x the cost model) ask
for different memory and time, so a plain array would under-request for some tasks.

``install()`` wraps the plugin's ``Executor._submit_array_jobs`` so that the jobs handed to it
are first split by their sbatch request (``request_key``): each group of two or more jobs with
one request becomes its own array, a job whose request is unique is submitted as a plain job.
Nothing else of the plugin changes. The Snakefile calls ``install()`` on the submitting host
(where the executor runs); the plugin version is pinned (pyproject.toml) and checked here, so a
plugin upgrade that changes the method fails loudly instead of silently mis-requesting.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from headgeom.core.errors import HeadgeomError

PLUGIN_VERSION = "2.8.0"

# Resources that never reach sbatch, or that Snakemake derives from others (mem_mib from mem_mb,
# disk_mib from disk_mb) and that therefore add nothing to the key.
_NOT_A_REQUEST = frozenset({"_cores", "_nodes", "tmpdir", "mem_mib", "disk_mib"})


def request_key(resources: dict[str, Any], threads: int) -> tuple:
    """What a job asks SLURM for: every resource that can reach sbatch, plus its threads.

    Two jobs with equal keys can share one ``sbatch --array`` call without either one's
    request changing.
    """
    items = tuple(sorted((k, str(v)) for k, v in resources.items() if k not in _NOT_A_REQUEST))
    return (("threads", str(threads)), *items)


def split_by_request(jobs: Iterable[Any]) -> list[list[Any]]:
    """Jobs grouped by ``request_key`` (first-seen order of groups and of jobs in a group)."""
    groups: dict[tuple, list[Any]] = {}
    for job in jobs:
        groups.setdefault(request_key(dict(job.resources.items()), job.threads), []).append(job)
    return list(groups.values())


def install() -> bool:
    """Make the slurm executor plugin submit one array per distinct request. Idempotent.

    Returns False where the plugin is not installed (a local run needs nothing). Raises
    HeadgeomError where an installed plugin is not the version this wrapper was written for.
    """
    try:
        import snakemake_executor_plugin_slurm as plugin
    except ImportError:
        return False
    from importlib.metadata import version

    found = version("snakemake-executor-plugin-slurm")
    executor = plugin.Executor
    if found != PLUGIN_VERSION or not hasattr(executor, "_submit_array_jobs"):
        raise HeadgeomError(
            f"snakemake-executor-plugin-slurm {found} is installed; headgeom's per-request job "
            f"arrays (headgeom/jobs/slurm_arrays.py) are written for {PLUGIN_VERSION}. Install "
            f"{PLUGIN_VERSION} (pyproject.toml pins it) or check that the new version's "
            "Executor._submit_array_jobs still submits one request for all jobs, then update "
            "PLUGIN_VERSION."
        )
    if getattr(executor._submit_array_jobs, "_headgeom_split", False):
        return True
    original = executor._submit_array_jobs

    def submit_split(self, jobs):
        for group in split_by_request(jobs):
            if len(group) == 1:
                self._submit_job(group[0])
            else:
                original(self, group)

    submit_split._headgeom_split = True
    submit_split.__doc__ = original.__doc__
    executor._submit_array_jobs = submit_split
    return True
