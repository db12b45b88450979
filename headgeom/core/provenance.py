"""Provenance: what code, config and tensors a number came from."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from pathlib import Path

from headgeom import __version__

PKG_DIR = Path(__file__).resolve().parents[1]


# How the running job was executed (set by the per-layer job entry, headgeom.rules.scripts.per_layer_job): its attempt number (a
# retry asks for more memory and time, headgeom/rules/jobs.py job_cost), the rule and, under
# SLURM, the job id; write_shard records it in every shard's provenance as "run".
_RUN: dict = {}


def set_run(**info) -> None:
    _RUN.update({k: v for k, v in info.items() if v is not None})


def run_info() -> dict:
    return dict(_RUN)


# The run's code version, computed once by the Snakemake process (headgeom.rules.start) and handed to
# its jobs in the environment with a stamp of what it was computed from; a job whose stamp differs
# (code, workflow or git state changed since) computes its own. Saves every job the source hash and
# two git processes.
CODE_VERSION_ENV = "HEADGEOM_CODE_VERSION"


@functools.lru_cache(maxsize=1)
def code_version() -> dict:
    """Package version, a hash of the package source (works without git), and the git
    commit of the checkout when there is one."""
    handed = _handed_down(os.environ.get(CODE_VERSION_ENV))
    return handed if handed is not None else _computed_code_version()


def _computed_code_version() -> dict:
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


def _stat(p: Path) -> list | None:
    try:
        st = p.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def code_stamp() -> list:
    """What code_version is computed from, by path, size and mtime (no file read): every file under
    the package and workflow/ (bytecode caches aside) and git's HEAD, index and current ref. Equal
    stamps, same code version; any doubt (a file touched, a commit) makes them differ."""
    root = PKG_DIR.parent
    files = []
    for top in (PKG_DIR, root / "workflow"):
        for d, dirs, names in os.walk(top):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for e in sorted(names):
                st = os.stat(os.path.join(d, e))
                files.append([os.path.relpath(os.path.join(d, e), root), st.st_size, st.st_mtime_ns])
    git = []
    dot = root / ".git"
    try:
        gitdir = dot if dot.is_dir() else Path(dot.read_text().split("gitdir:", 1)[1].strip())
        head = (gitdir / "HEAD").read_text().strip()
        common = gitdir / Path((gitdir / "commondir").read_text().strip()) if (gitdir / "commondir").is_file() else gitdir
        git = [head, _stat(gitdir / "index"), _stat(common / "packed-refs")]
        if head.startswith("ref:"):
            git.append(_stat(common / head[4:].strip()))
    except (OSError, IndexError):
        git = [None]
    return [files, git]


def hand_down_code_version() -> None:
    """Put this process's code version (and its stamp) in the environment its jobs inherit."""
    os.environ[CODE_VERSION_ENV] = json.dumps({"stamp": code_stamp(), "version": code_version()})


def _handed_down(text: str | None) -> dict | None:
    """The handed-down code version when its stamp is this checkout's now; None otherwise."""
    if not text:
        return None
    try:
        handed = json.loads(text)
        stamp, version = handed["stamp"], handed["version"]
    except (ValueError, KeyError, TypeError):
        return None
    return version if isinstance(version, dict) and stamp == code_stamp() else None
