"""The environment that makes the pipeline's job processes inject a test fault.

``fault_env(HEADGEOM_TEST_FAIL_FIRST_ATTEMPT="pk_within_layer")`` returns the variables to set for a
Snakemake run: the named ones, and PYTHONPATH with ``tests/helpers/jobhooks`` in front, whose
``sitecustomize.py`` installs the hooks in every Python process started with it (its docstring
lists the variables). The pipeline's own code has no test hooks."""

from __future__ import annotations

import os
from pathlib import Path

HOOKS = Path(__file__).resolve().parent / "jobhooks"
VARIABLES = ("HEADGEOM_TEST_FAIL_FIRST_ATTEMPT", "HEADGEOM_TEST_MEMORY_MB")


def fault_env(base: dict | None = None, **variables: str) -> dict[str, str]:
    """The variables to add to ``base`` (default: os.environ) for a run with these faults."""
    unknown = set(variables) - set(VARIABLES)
    if unknown:
        raise ValueError(f"unknown fault variable(s) {sorted(unknown)}; known: {list(VARIABLES)}")
    env = os.environ if base is None else base
    path = [str(HOOKS)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(HOOKS)]
    return {"PYTHONPATH": os.pathsep.join(path), **variables}
