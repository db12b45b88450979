"""Extra ``--forcerun`` targets added from inside the Snakefile (``headgeom verify``'s damaged
shards: the workflow rebuilds them, and everything downstream, without the user naming them).

Snakemake 9.27.1 hands the command line's DAG settings (``DAGSettings``, with ``forcerun``) to the
``Workflow`` only after the Snakefile has been read, and offers no API to add forcerun targets from
it. ``force_rebuild`` swaps the workflow object's class for a subclass whose ``__setattr__`` extends
``dag_settings.forcerun`` when it is set (and at once, if it is set already).
"""

from __future__ import annotations

from headgeom.patches import warn_unpinned

PINNED = {"snakemake": "9.27.1"}
UPSTREAM = ("snakemake sets Workflow.dag_settings (forcerun) after the Snakefile is read; no API adds "
            "forcerun targets from within the Snakefile")


def force_rebuild(workflow, paths: list[str]) -> None:
    """Make this Snakemake run rebuild ``paths`` (as ``--forcerun PATH ...`` would: their jobs
    rerun, and every job downstream of them). The command line's DAG settings reach the workflow
    only after the Snakefile is read, so they are extended when they are set."""
    import dataclasses

    if not paths:
        return
    warn_unpinned(PINNED, "headgeom/patches/forcerun.py")
    extra = frozenset(paths)
    base = type(workflow)

    class _Forcing(base):
        def __setattr__(self, name, value):
            if name == "dag_settings" and value is not None:
                value = dataclasses.replace(value, forcerun=frozenset(value.forcerun) | extra)
            super().__setattr__(name, value)

    _Forcing.__name__ = _Forcing.__qualname__ = base.__name__
    workflow.__class__ = _Forcing
    if workflow.dag_settings is not None:  # already set (an API caller that set it first)
        workflow.dag_settings = workflow.dag_settings
