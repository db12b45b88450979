"""Parquet shards: one per job, written atomically, with provenance in the schema metadata
under the key ``headgeom``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from headgeom.io.files import atomic_path, sha256_file

META_KEY = b"headgeom"


def columns_table(columns: dict[str, np.ndarray]):
    """A job's columns as the pyarrow Table its shard holds (object columns through lists)."""
    import pyarrow as pa

    arrays = {}
    for k, v in columns.items():
        v = np.asarray(v)
        arrays[k] = pa.array(v.tolist() if v.dtype == object else v)
    return pa.table(arrays)


def write_shard(path: str | Path, columns: dict[str, np.ndarray], provenance: dict) -> None:
    import pyarrow.parquet as pq

    table = columns_table(columns)
    from headgeom.core.provenance import run_info

    if run_info():  # attempt, rule, SLURM job id of the running job
        provenance = {**provenance, "run": run_info()}
    table = table.replace_schema_metadata({META_KEY: json.dumps(provenance, sort_keys=True, default=str).encode()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_shard(path: str | Path):
    """(pyarrow Table, provenance dict)."""
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    meta = t.schema.metadata or {}
    if META_KEY not in meta:
        raise ValueError(f"{path} is not a headgeom shard (no provenance metadata)")
    return t, json.loads(meta[META_KEY])


def read_shards(paths) -> tuple[dict[str, np.ndarray], list[dict]]:
    """Concatenate shards into numpy columns; also return each shard's provenance record
    (with the file's sha256) for the aggregate's sidecar."""
    import pyarrow as pa

    tables, provs = [], []
    for p in paths:
        t, prov = read_shard(p)
        tables.append(t)
        provs.append({"path": str(p), "sha256": sha256_file(p), "rows": t.num_rows, "provenance": prov})
    if not tables:
        return {}, provs
    t = pa.concat_tables(tables, promote_options="default")
    return {c: np.asarray(t.column(c).to_numpy(zero_copy_only=False)) for c in t.column_names}, provs
