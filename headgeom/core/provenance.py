"""Provenance: what code, config and tensors a number came from."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from headgeom import __version__

PKG_DIR = Path(__file__).resolve().parents[1]


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
            dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "headgeom", "workflow"],
                                   capture_output=True, text=True, timeout=5)
            out["git_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return out
