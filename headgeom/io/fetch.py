"""Fetch stage: one model entry -> tensor store."""

from __future__ import annotations

from pathlib import Path

from headgeom.io.sources import open_source
from headgeom.io.store import extract


def fetch_model(model: str, entry: dict, out_dir: str | Path, log=print) -> dict:
    with open_source(entry, log=log) as (ckpt, source):
        log(f"[fetch {model}] source {source}")
        return extract(ckpt, out_dir, model, source, log=log, architecture=entry.get("architecture"))
