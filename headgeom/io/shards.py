"""Parquet shards: one per job, written atomically, with provenance in the schema metadata
under the key ``headgeom``.

Every shard carries its own content record, checked before any use (``shard_problems``,
``verify_shard``; ``read_shard`` and ``read_shards`` call it): Parquet page checksums (CRC32 of
every data page) and, in the footer's key-value metadata under ``headgeom_content_sha256``, the
sha256 of what the footer cannot vouch for by itself: every byte before the footer (the data
pages), the provenance record and the layout (column names and types, row count). A flipped bit,
a truncated or overwritten file, or a foreign Parquet file at a shard's path is named as damaged
with the command that rebuilds it, never read as data.

The provenance also records what the shard *is* (``identity``: its family, model and layer /
block / part, and the alternative of the choice sensitivity, read from the path it was written
to; the checkpoint, its tensor store's sha256; the digest of the config values the job used,
``config_digest``). ``shard_check`` compares the identity with the path the shard is read from and
with the tensor store beside it: a sound shard at another shard's path (another layer, model,
part, block) or of another checkpoint is damage like a flipped bit."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np

from headgeom.core.errors import DamagedFileError
from headgeom.io.files import atomic_path

META_KEY = b"headgeom"
# the shard's content record (footer key-value metadata, added after the data pages are written)
CONTENT_KEY = b"headgeom_content_sha256"
_MAGIC = b"PAR1"


def columns_table(columns: dict[str, np.ndarray]):
    """A job's columns as the pyarrow Table its shard holds (object columns through lists):
    ``pa.array(v.tolist() if v.dtype == object else v)`` per column, built from buffers where
    :func:`_from_buffers` knows the type ``pa.array`` infers (``pa.array`` imports pandas on its
    first call, about 0.3 CPU-s in every job's process)."""
    import pyarrow as pa

    arrays = {}
    for k, v in columns.items():
        v = np.asarray(v)
        a = _from_buffers(v)
        arrays[k] = a if a is not None else pa.array(v.tolist() if v.dtype == object else v)
    return pa.table(arrays)


def _buffer(v: np.ndarray):
    import pyarrow as pa

    return pa.py_buffer(np.ascontiguousarray(v))


def _numeric_array(v: np.ndarray):
    """A 1-D native-order bool / int / uint / float numpy array as the Array pa.array makes of it."""
    import pyarrow as pa

    if v.dtype.kind == "b":
        return pa.Array.from_buffers(pa.bool_(), len(v), [None, _buffer(np.packbits(v, bitorder="little"))])
    return pa.Array.from_buffers(pa.from_numpy_dtype(v.dtype), len(v), [None, _buffer(v)])


def _is_float_list(x) -> bool:
    if isinstance(x, np.ndarray):
        return x.ndim == 1 and x.dtype == np.float64
    return isinstance(x, list) and all(isinstance(e, float) for e in x)


def _from_buffers(v: np.ndarray):
    """The Array ``pa.array`` makes of a column, for the column kinds jobs write (1-D bool / int /
    float; unicode or str objects: string; all-None or empty objects: null; objects that are all
    float64 vectors or lists of floats, or a 2-D object matrix of floats (its rows):
    list<double>); None for anything else (``pa.array`` decides)."""
    import pyarrow as pa

    if v.ndim == 2 and v.dtype == object and v.size and all(isinstance(x, float) for x in v.flat):
        # rows of equal length (numpy made them a matrix): tolist() gives lists of floats
        n, m = v.shape
        offsets = np.arange(0, n * m + 1, m, dtype=np.int64)
        if offsets[-1] > np.iinfo(np.int32).max:
            return None
        return pa.ListArray.from_arrays(_numeric_array(offsets.astype(np.int32)),
                                        _numeric_array(v.astype(np.float64).ravel()))
    if v.ndim != 1 or not v.dtype.isnative:
        return None
    if v.dtype.kind in "biuf":
        return _numeric_array(v)
    if v.dtype.kind == "U":
        items = v.tolist()
    elif v.dtype == object:
        items = list(v)
        if all(x is None for x in items):  # also the empty column
            return pa.nulls(len(items))
        if not all(type(x) is str for x in items):
            if not all(_is_float_list(x) for x in items) or not any(
                    isinstance(x, np.ndarray) or len(x) for x in items):
                return None
            lengths = np.array([len(x) for x in items], dtype=np.int64)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            if offsets[-1] > np.iinfo(np.int32).max:
                return None
            values = np.concatenate([np.asarray(x, dtype=np.float64) for x in items]) if len(items) else \
                np.zeros(0, np.float64)
            return pa.ListArray.from_arrays(_numeric_array(offsets.astype(np.int32)), _numeric_array(values))
    else:
        return None
    data = [x.encode("utf-8") for x in items]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in data], dtype=np.int64)])
    if offsets[-1] > np.iinfo(np.int32).max:
        return None
    return pa.Array.from_buffers(pa.string(), len(data), [None, _buffer(offsets.astype(np.int32)),
                                                          pa.py_buffer(b"".join(data))])


IDENTITY = "identity"  # the provenance key of what a shard is (module docstring)
_GRAIN = re.compile(r"(layer|block|part)(\d+)")


def shard_where(path: str | Path) -> dict | None:
    """What the shard at ``path`` is by its place in a work directory: ``{"family", "model",
    "layer" / "block" / "part" (ints), "alt" (under results/sensitivity/<alt>/)}`` from the
    path's last ``results/shards/<family>/<model>/...`` (headgeom.layout.SHARD); None for a path
    outside that layout."""
    parts = Path(path).parts
    at = next((i for i in range(len(parts) - 1, 0, -1) if parts[i] == "shards" and parts[i - 1] == "results"), None)
    if at is None or len(parts) - at < 4 or not parts[-1].endswith(".parquet"):
        return None
    family, model, *grain = parts[at + 1:]
    where: dict = {"family": family, "model": model}
    for piece in grain:
        m = _GRAIN.fullmatch(piece.removesuffix(".parquet"))
        if m is None or m[1] in where:
            return None
        where[m[1]] = int(m[2])
    if at >= 4 and parts[at - 3] == "sensitivity" and parts[at - 4] == "results":
        where["alt"] = parts[at - 2]
    return where


def where_name(where: dict | None) -> str:
    """A shard's place as a short name: ``pk_null_within/tiny/layer0/block1`` (``[alt]`` after it)."""
    if not isinstance(where, dict):
        return "no place (written outside results/shards)"
    name = "/".join([str(where.get("family")), str(where.get("model"))]
                    + [f"{k}{where[k]}" for k in ("layer", "block", "part") if k in where])
    return name + (f" [{where['alt']}]" if "alt" in where else "")


def config_digest(params) -> str:
    """The digest of the config values a job used (its params, as its provenance records them)."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


def shard_identity(path: str | Path, provenance: dict) -> dict:
    """What the shard written to ``path`` with ``provenance`` is (module docstring)."""
    source = provenance.get("model_source") or {}
    return {"where": shard_where(path), "checkpoint": source.get("store_sha256"),
            "config": config_digest(provenance.get("params"))}


def write_shard(path: str | Path, columns: dict[str, np.ndarray], provenance: dict) -> None:
    """Write one shard atomically, with page checksums, its content record and its identity
    (module docstring)."""
    import pyarrow.parquet as pq

    table = columns_table(columns)
    from headgeom.core.provenance import run_info

    provenance = {**provenance, IDENTITY: shard_identity(path, provenance)}
    if run_info():  # attempt, rule, SLURM job id of the running job
        provenance = {**provenance, "run": run_info()}
    meta = json.dumps(provenance, sort_keys=True, default=str).encode()
    table = table.replace_schema_metadata({META_KEY: meta})
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        sink = _HashingSink(fh)
        with pq.ParquetWriter(sink, table.schema, compression="zstd", write_page_checksum=True) as w:
            w.write_table(table)
            # everything before the footer is written: record its hash in the footer
            w.add_key_value_metadata({CONTENT_KEY: _content_hash(sink.hash.copy(), meta, table.schema,
                                                                 table.num_rows)})


class _HashingSink:
    """A binary file the Parquet writer writes through, hashing every byte on its way."""

    def __init__(self, fh):
        self.fh, self.hash, self.n, self.closed = fh, hashlib.sha256(), 0, False

    def write(self, b) -> int:
        self.fh.write(b)
        self.hash.update(b)
        self.n += len(b)
        return len(b)

    def tell(self) -> int:
        return self.n

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False


def _layout(schema, num_rows: int) -> bytes:
    return json.dumps([[f.name, _type_name(f.type)] for f in schema] + [num_rows]).encode()


def _type_name(t) -> str:
    """A column type as written and as read back (Parquet renames a list's item field)."""
    import pyarrow as pa

    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{_type_name(t.value_type)}>"
    return str(t)


def _content_hash(h, meta: bytes, schema, num_rows: int) -> str:
    """The content record: ``h`` (sha256 of the bytes before the footer) continued with the
    provenance and the layout."""
    h.update(b"\0" + meta + b"\0" + _layout(schema, num_rows))
    return h.hexdigest()


def rebuild_hint(path: str | Path) -> str:
    """The command that rebuilds a workflow file (a shard under results/: its job reruns)."""
    from headgeom.io.files import within_workdir

    return f"snakemake -c2 {within_workdir(path)} (add your usual --configfile)"


def rebuild_command(rule: str, target: str | Path, configfiles=()) -> str:
    """The command that rebuilds ``target`` by rerunning ``rule`` even when Snakemake sees it as
    up to date: the target first (``--forcerun`` takes every word after it as a rule name)."""
    cmd = f"snakemake -c2 {target} --forcerun {rule}"
    return cmd + (" --configfile " + " ".join(configfiles) if configfiles else "")


NO_RECORD = "has no content record"  # the one problem of a sound shard an older headgeom wrote


def shard_check(path: str | Path, bufsize: int = 1 << 20, config: str | None = None) -> tuple[list[str], str | None]:
    """(problems, the file's sha256): ``problems`` is empty when the shard at ``path`` is sound and
    is the shard asked for: a Parquet file whose footer parses, that holds headgeom provenance and
    a content record, whose bytes before the footer, provenance and layout hash to that record, and
    whose identity is that of ``path`` (``identity_problems``; ``config``: the config digest the
    caller expects). Reads the file once
    (the sha256 of the whole file comes from the same pass); does not decode the data pages (their
    checksums are verified when they are read)."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if size < 12:
                return [f"{size} bytes, too short to be a Parquet file (truncated)"], None
            fh.seek(size - 8)
            tail = fh.read(8)
            flen = int.from_bytes(tail[:4], "little")
            if tail[4:] != _MAGIC or not 0 < flen <= size - 12:
                return ["no Parquet footer at its end (truncated or overwritten)"], None
            fh.seek(0)
            h = hashlib.sha256()
            left = size - 8 - flen
            while left:
                chunk = fh.read(min(bufsize, left))
                if not chunk:
                    return ["shorter than its footer says (truncated)"], None
                h.update(chunk)
                left -= len(chunk)
            whole = h.copy()
            whole.update(fh.read())
        with pq.ParquetFile(path) as f:
            kv = f.metadata.metadata or {}
            schema, rows = f.schema_arrow, f.metadata.num_rows
    except OSError as e:
        return [f"unreadable ({e.strerror or e})"], None
    except Exception as e:  # noqa: BLE001 - pyarrow's errors for a footer it cannot parse
        return [f"does not parse as Parquet ({type(e).__name__}: {e})"], None
    if META_KEY not in kv:
        return ["not a headgeom shard (no provenance in its footer)"], whole.hexdigest()
    if CONTENT_KEY not in kv:
        return [f"{NO_RECORD} (written by a headgeom that did not record one)"], whole.hexdigest()
    if _content_hash(h, kv[META_KEY], schema, rows) != kv[CONTENT_KEY].decode(errors="replace"):
        return ["its content does not match its record (a changed byte)"], whole.hexdigest()
    try:
        prov = json.loads(kv[META_KEY])
    except ValueError:
        return ["its provenance does not parse"], whole.hexdigest()
    return identity_problems(path, prov, config), whole.hexdigest()


NO_IDENTITY = "has no identity record"  # the one problem of a sound shard a headgeom before identities wrote


def identity_problems(path: str | Path, provenance: dict, config: str | None = None) -> list[str]:
    """Why a shard with ``provenance`` is not the shard at ``path`` ([] = it is): its recorded place
    against the path's (``shard_where``), its checkpoint against the tensor store of its model in
    the same work directory (when there is one), and with ``config`` its config digest against that
    one (the digest this config gives the job: headgeom.verify.expected)."""
    ident = provenance.get(IDENTITY) if isinstance(provenance, dict) else None
    if not isinstance(ident, dict):
        return [f"{NO_IDENTITY} (written by a headgeom that did not record what a shard is)"]
    where = shard_where(path)
    if where is not None and ident.get("where") != where:
        return [f"it is the shard of {where_name(ident.get('where'))}, not of {where_name(where)} "
                "(a sound shard at another shard's path)"]
    expected = store_checkpoint(path)
    if expected is not None and ident.get("checkpoint") != expected:
        return [f"it was computed from another checkpoint (tensor store sha256 {str(ident.get('checkpoint'))[:12]}, "
                f"the store beside it is {expected[:12]})"]
    if config is not None and ident.get("config") != config:
        return [f"it was computed with other config values (config digest {str(ident.get('config'))[:12]}, this "
                f"config's is {config[:12]})"]
    return []


_STORES: dict = {}  # manifest path -> ((size, mtime_ns), store_sha256): each manifest parsed once per process


def store_checkpoint(path: str | Path) -> str | None:
    """The sha256 of the tensor store a shard at ``path`` is computed from: the manifest of its
    model's store in the shard's work directory (a choice-sensitivity alternative's shards: the
    run's); None where there is none (a shard outside a work directory, a store not fetched)."""
    where = shard_where(path)
    if where is None:
        return None
    parts = Path(path).parts
    at = max(i for i in range(1, len(parts)) if parts[i] == "shards" and parts[i - 1] == "results") - 1
    if "alt" in where:
        at -= 3
    manifest = Path(*parts[:at], "results", "tensors", where["model"], "manifest.json")
    try:
        st = manifest.stat()
        key = (st.st_size, st.st_mtime_ns)
        hit = _STORES.get(str(manifest))
        if hit is None or hit[0] != key:
            hit = _STORES[str(manifest)] = (key, json.loads(manifest.read_text()).get("store_sha256"))
    except (OSError, ValueError, AttributeError):
        return None
    return hit[1] if isinstance(hit[1], str) else None


def shard_problems(path: str | Path, config: str | None = None) -> list[str]:
    """Why the shard at ``path`` is damaged ([] = sound): ``shard_check`` without the sha256."""
    return shard_check(path, config=config)[0]


def damaged(path: str | Path, problems: list[str]) -> DamagedFileError:
    """The error a reader stops with: one line naming the file, what is wrong, the rebuild command."""
    return DamagedFileError(f"{path} is damaged: {'; '.join(problems)}; rebuild it: {rebuild_hint(path)}")


def verify_shard(path: str | Path) -> str:
    """Check the shard at ``path`` before any use; its sha256, or DamagedFileError (one line)."""
    problems, sha = shard_check(path)
    if problems:
        raise damaged(path, problems)
    return sha


def read_shard(path: str | Path, read_dictionary: list[str] | None = None, verified: bool = False):
    """(pyarrow Table, provenance dict), verified first (``verify_shard``; ``verified``: the
    caller has just done so) and read with page checksums checked. Read with ``ParquetFile``:
    ``pq.read_table`` goes through ``pyarrow.dataset``, whose import pulls in pandas (about
    0.3 CPU-s per process, more than most tables take to build); the table read is the same.
    ``read_dictionary``: string columns read as dictionary arrays (each distinct string once;
    ``column_numpy`` gives the same values)."""
    import pyarrow.parquet as pq

    if not verified:
        verify_shard(path)
    try:
        with pq.ParquetFile(path, read_dictionary=read_dictionary or None, page_checksum_verification=True) as f:
            t = f.read()
    except OSError as e:  # a page whose checksum fails, or that does not decode
        raise damaged(path, [f"a data page does not read ({e})"]) from e
    meta = t.schema.metadata or {}
    return t, json.loads(meta[META_KEY])


def read_shards(paths) -> tuple[dict[str, np.ndarray], list[dict]]:
    """Concatenate shards into numpy columns; also return each shard's provenance record
    (with the file's sha256) for the aggregate's sidecar. Every shard is verified first
    (``verify_shard``): a damaged one stops the read with DamagedFileError before any is used."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    provs, layouts, tables, out, at = [], [], [], {}, 0
    shas = [verify_shard(p) for p in paths]
    for p in paths:
        with pq.ParquetFile(p) as f:
            layouts.append((f.metadata.num_rows, f.schema_arrow))
    # a shard with no rows (a layer where a test does not apply) carries no types worth
    # merging: an empty list column written as float64 must not clash with another shard's int64
    keep = [i for i, (n, _) in enumerate(layouts) if n] or ([0] if layouts else [])
    one_layout = all(_same_columns(layouts[keep[0]][1], layouts[i][1]) for i in keep)
    total = sum(layouts[i][0] for i in keep)
    for i, p in enumerate(paths):
        strings = [fld.name for fld in layouts[i][1] if pa.types.is_string(fld.type)]
        t, prov = read_shard(p, read_dictionary=strings, verified=True)
        provs.append({"path": str(p), "sha256": shas[i], "rows": t.num_rows, "provenance": prov})
        if i not in keep:
            continue
        if not one_layout:  # shards differ: pyarrow merges them
            tables.append(t)
            continue
        # one layout: each column allocated once at its full length and filled shard by shard, so
        # neither every shard's Arrow table nor per-shard pieces are held beside the result (a
        # read-path family holds tens of millions of rows)
        for c in t.column_names:
            col = column_numpy(t.column(c))
            if c not in out:
                out[c] = np.empty(total, dtype=col.dtype)
            out[c][at:at + len(col)] = col
        at += t.num_rows
        del t
    if tables:
        t = pa.concat_tables(tables, promote_options="default")
        return {c: column_numpy(t.column(c)) for c in t.column_names}, provs
    return out, provs


def _same_columns(a, b) -> bool:
    """Same column names and types, in order."""
    return a.names == b.names and all(x.type == y.type for x, y in zip(a, b))


# pyarrow type names -> numpy dtypes of the fixed-width numeric columns read by buffer
_NUMERIC = {"double": "float64", "float": "float32", "halffloat": "float16"}


def _numeric(arr) -> np.ndarray:
    """A null-free fixed-width numeric / bool pyarrow Array as an owned numpy array (from its buffer)."""
    import pyarrow as pa

    data = arr.buffers()[1]
    if pa.types.is_boolean(arr.type):  # bit-packed, least significant bit first
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little") if data is not None else \
            np.zeros(0, np.uint8)
        return bits[arr.offset:arr.offset + len(arr)].astype(bool)
    dtype = np.dtype(_NUMERIC.get(str(arr.type), str(arr.type)))
    if data is None or len(arr) == 0:
        return np.zeros(0, dtype)
    return np.frombuffer(data, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize).copy()


def column_numpy(col) -> np.ndarray:
    """A shard column (pyarrow ChunkedArray) as numpy, as ``col.to_numpy(zero_copy_only=False)``
    gives it, for the types shards hold without nulls (bool, int, float: their numpy dtype; string
    and null: object arrays of str / None; list<float>: an object array of float arrays), read from
    the buffers: pyarrow's numpy conversion (``to_numpy``) imports pandas on first use, about
    0.3 CPU-s in every table's process. Any other type, or nulls, go through ``to_numpy``."""
    import pyarrow as pa

    typ = col.type
    if col.null_count == 0 and (pa.types.is_boolean(typ) or pa.types.is_integer(typ) or pa.types.is_floating(typ)):
        return _numeric(col.combine_chunks())
    if col.null_count == 0 and pa.types.is_dictionary(typ) and pa.types.is_string(typ.value_type):
        # one str object per distinct value, shared by its rows (a read-path shard family holds
        # tens of millions of rows of a few model / kind names)
        parts = []
        for chunk in col.chunks:
            values = np.empty(len(chunk.dictionary), dtype=object)
            values[:] = chunk.dictionary.to_pylist()
            parts.append(values[_numeric(chunk.indices)] if len(chunk) else values[:0])
        return np.concatenate(parts) if parts else np.empty(0, dtype=object)
    if pa.types.is_dictionary(typ):  # with nulls: as plain values, read as below
        col = pa.chunked_array([c.dictionary_decode() for c in col.chunks], typ.value_type)
        typ = col.type
    if pa.types.is_null(typ) or (col.null_count == 0 and pa.types.is_string(typ)):
        out = np.empty(len(col), dtype=object)
        out[:] = col.to_pylist()
        return out
    if col.null_count == 0 and pa.types.is_list(typ) and pa.types.is_floating(typ.value_type):
        flat = col.combine_chunks()
        if flat.values.null_count == 0:
            values, offsets = _numeric(flat.values), _numeric(flat.offsets)
            out = np.empty(len(flat), dtype=object)
            for i in range(len(flat)):
                out[i] = values[offsets[i]:offsets[i + 1]]
            return out
    return np.asarray(col.to_numpy(zero_copy_only=False))
