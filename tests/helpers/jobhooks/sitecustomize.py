"""Test-only fault injection into the pipeline's job processes; the production code has no hooks.

Python imports ``sitecustomize`` at start-up from the first directory of ``sys.path`` that has one,
so a process whose PYTHONPATH starts with this directory runs this file before anything else.
``tests/helpers/faults.py`` (``fault_env``) builds that environment; Snakemake passes it on to
every job it runs, locally and through SLURM (sbatch exports the submitting environment).

With one of the variables below set, ``headgeom.schedule.families.run_job`` (what
``headgeom.rules.scripts.per_layer_job`` calls for every per-layer job) is wrapped as the module is imported:

  HEADGEOM_TEST_FAIL_FIRST_ATTEMPT=<rule>[,<rule>...]
      attempt 1 of a listed rule raises RuntimeError, so that a retry with grown resources can be
      observed (tests/workflow/test_retries.py, test_preflight.py, test_slurm.py)
  HEADGEOM_TEST_MEMORY_MB=<rule>=<MB>[,...]
      every attempt of a listed rule first holds <MB> of touched memory for a few seconds (and keeps
      it until the process ends), so that SLURM's memory enforcement kills an attempt whose request
      is smaller and lets one with a grown request finish (tests/workflow/test_slurm.py)

The attempt is the one the per-layer entry records with ``headgeom.core.provenance.set_run`` before it calls
``run_job``. Without either variable this file does nothing.
"""

import importlib.abc
import os
import sys

FAIL_FIRST_ATTEMPT = "HEADGEOM_TEST_FAIL_FIRST_ATTEMPT"
MEMORY_MB = "HEADGEOM_TEST_MEMORY_MB"
TARGET = "headgeom.schedule.families"

_held = []  # the memory ballast, alive until the process ends


def _inject(job: str) -> None:
    from headgeom.core.provenance import run_info

    attempt = int(run_info().get("attempt", 1))
    if attempt == 1 and job in os.environ.get(FAIL_FIRST_ATTEMPT, "").split(","):
        raise RuntimeError(f"{job}: attempt 1 failed on purpose ({FAIL_FIRST_ATTEMPT})")
    ballast = dict(kv.split("=") for kv in os.environ.get(MEMORY_MB, "").split(",") if kv)
    if job in ballast:
        import time

        import numpy as np

        _held.append(np.ones(int(ballast[job]) * 2**20 // 8))
        time.sleep(4)  # longer than two samples of JobAcctGatherFrequency=task=1


def _wrap(module) -> None:
    import functools

    run_job = module.run_job

    @functools.wraps(run_job)
    def run_job_with_faults(name, *args, **kwargs):
        _inject(name)
        return run_job(name, *args, **kwargs)

    module.run_job = run_job_with_faults


class _WrappingLoader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _wrap(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds TARGET with the finders after it and wraps its loader; every other import passes."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _WrappingLoader(spec.loader)
                return spec
        return None


if os.environ.get(FAIL_FIRST_ATTEMPT) or os.environ.get(MEMORY_MB):
    sys.meta_path.insert(0, _Finder())
