"""Provenance: what code, config and tensors a number came from."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from headgeom import __version__

PKG_DIR = Path(__file__).resolve().parents[1]


# How the running job was executed (set by workflow/scripts/job.py): its attempt number (a
# retry asks for more memory and time, headgeom/rules/jobs.py job_cost), the rule and, under
# SLURM, the job id; write_shard records it in every shard's provenance as "run".
_RUN: dict = {}


def set_run(**info) -> None:
    _RUN.update({k: v for k, v in info.items() if v is not None})


def run_info() -> dict:
    return dict(_RUN)


@functools.lru_cache(maxsize=1)
def code_version() -> dict:
    """Package version, a hash of the package source (works without git), and the git
    commit of the checkout when there is one."""
    h = hashlib.sha256()
    for p in sorted(PKG_DIR.rglob("*.py")):
        h.update(p.relative_to(PKG_DIR).as_posix().encode())
        h.update(p.read_bytes())
    out = {"headgeom": __version__, "source_sha256": h.hexdigest()}
    try:
        root = PKG_DIR.parent
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if commit.returncode == 0:
            out["git_commit"] = commit.stdout.strip()
            dirty = subprocess.run(["git", "--no-optional-locks", "-C", str(root), "status", "--porcelain", "--", "headgeom", "workflow"],
                                   capture_output=True, text=True, timeout=5)
            out["git_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return out
