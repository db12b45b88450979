"""Patches of third-party internals, one module each. Every module names the versions it was
written against (``PINNED``, distribution -> version; pyproject.toml pins the same) and the
upstream behaviour it works around (its docstring and ``UPSTREAM``). ``install()`` warns, one
line, where an installed version differs from ``PINNED`` and patches anyway when the methods it
replaces are still there; it refuses (HeadgeomError) only where they are gone.

  slurm_arrays       snakemake-executor-plugin-slurm: array jobs that never hold a ready job back
                     and keep each task's own resource request
  scheduler_timers   snakemake: at most one pending re-evaluation timer in the job scheduler
  forcerun           snakemake: --forcerun targets added from inside the Snakefile (headgeom verify's
                     damaged shards rebuilt in the run)
"""

from __future__ import annotations

import warnings


class PinnedVersionWarning(UserWarning):
    """An installed package is not the version a patch was written against."""


def version_mismatches(pinned: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Distribution -> (pinned, installed) for every pinned package installed at another version."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist, want in pinned.items():
        try:
            found = version(dist)
        except PackageNotFoundError:
            continue
        if found != want:
            out[dist] = (want, found)
    return out


def warn_unpinned(pinned: dict[str, str], where: str) -> dict[str, tuple[str, str]]:
    """One warning line per pinned package installed at another version; returns the mismatches."""
    bad = version_mismatches(pinned)
    for dist, (want, found) in bad.items():
        warnings.warn(f"{where} was written for {dist} {want}; {found} is installed: check that the patched "
                      f"methods still behave as its docstring describes", PinnedVersionWarning, stacklevel=3)
    return bad
