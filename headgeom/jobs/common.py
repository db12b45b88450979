"""Shared by the job modules: a shard's provenance record and its key columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headgeom.core.provenance import code_version
from headgeom.io.store import TensorStore


def shard_provenance(kind: str, store: TensorStore, layer: int, params: dict) -> dict:
    return {
        "job": kind,
        "model": store.manifest["model"],
        "layer": layer,
        "params": params,
        "code": code_version(),
        "model_source": store.provenance(),
        "tensors": store.layer_tensors(layer),
        "fields": store.manifest["fields"],
    }


def with_keys(cols: dict, model: str, layer: int, key: str = "layer") -> dict:
    """The shard's key columns (model, and the layer under the name ``key``) in front of its data
    columns."""
    n = len(next(iter(cols.values()))) if cols else 0
    return {"model": np.array([model] * n, dtype=object), key: np.full(n, layer, dtype=np.int64), **cols}


def store_dir(inputs, manifest: str = "manifest") -> Path:
    """The tensor store of a job's model (or, ``manifest="final_manifest"``, of its lineage's final
    checkpoint): the directory of that manifest input."""
    return Path(inputs[manifest]).parent
