"""The tensor store: per model, only the attention and pre-attention-norm tensors, in one
safetensors file, with a manifest that says where every byte came from.

    results/tensors/{model}/tensors.safetensors
    results/tensors/{model}/manifest.json   (written last: its presence means "complete")

A store that fails its checks (``verify_store``: truncated, overwritten, a tensor whose bytes
do not match the manifest's sha256) stops the job reading it with an IntegrityError that gives
the command fetching it again, ``snakemake --forcerun results/tensors/{model}/manifest.json``:
that reruns the model's fetch and, through the new file times, every job computed from it. (Only
deleting the store is not enough: when the tables already exist, Snakemake cannot tell which
shards they need without the fetch checkpoint's manifest, and reports nothing to be done.) A
reader never moves or deletes the store.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headgeom import __version__
from headgeom.adapters import ADAPTERS, ArchFields, adapter_for, by_name
from headgeom.core.errors import CheckpointError, IntegrityError
from headgeom.core.factors import LayerFactors
from headgeom.io.files import json_default, atomic_path, sha256_bytes, sha256_file

MANIFEST = "manifest.json"
TENSORS = "tensors.safetensors"
STORE_SCHEMA = 1


@contextmanager
def store_lock(out_dir: str | Path, model: str):
    """Hold an exclusive lock on the store directory while one extract writes it; a second
    extract into the same store (another process, or a second Snakemake run) is refused at once
    with a CheckpointError instead of interleaving its files with the first one's. The lock is
    flock(2) on the directory itself: no lock file is left behind, and it dies with its holder."""
    import fcntl

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CheckpointError(
                f"{model}: another extract is writing the tensor store {out_dir} now; "
                "wait for it to finish (two runs must not fetch the same model into one results/ at once)"
            ) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def extract(ckpt, out_dir: str | Path, model: str, source: dict, log=print, architecture: str | None = None) -> dict:
    """Copy the tensors the architecture's adapter needs from ``ckpt`` into a store
    (under ``store_lock``: concurrent extracts into one store are refused). ``architecture``
    (the model's ``architecture:`` key) forces the architecture."""
    with store_lock(out_dir, model):
        return _extract(ckpt, Path(out_dir), model, source, log, architecture)


@dataclass
class AttentionTensors:
    """What a checkpoint holds for headgeom: the adapter that reads it, its fields, and the
    attention and pre-attention-norm tensors as they are stored (``read_attention``)."""

    fmt: str  # safetensors | gguf
    adapter: object
    fields: ArchFields
    tensors: dict  # checkpoint name -> C-ordered array (bfloat16 widened to float32, GGUF dequantized)
    source_dtypes: dict  # checkpoint name -> dtype in the checkpoint
    nonfinite: list  # names of tensors holding NaN or Inf

    def get(self, key: str) -> np.ndarray:
        """A tensor as float64, as TensorStore.get returns it (the adapters' getter)."""
        return _get_or_raise(self.tensors, key)


def read_attention(ckpt, model: str, architecture: str | None = None, log=print) -> AttentionTensors:
    """The tensors of ``ckpt`` that its architecture's adapter needs, checked layer by layer:
    what a tensor store keeps (``extract``) and what headgeom.api computes from."""
    fmt = "gguf" if ckpt.__class__.__name__ == "GGUFFile" else "safetensors"
    adapter = adapter_for(ckpt.config, fmt, architecture)
    keys = ckpt.keys()
    fields = adapter.fields(ckpt.config, keys)
    wanted = [k for k in keys if adapter.wanted(k, fields.prefix)]
    if not wanted:
        raise CheckpointError(f"{model}: no attention tensors matched adapter {adapter.name}")
    tensors, dtypes = {}, {}
    nonfinite = []
    for i, (k, arr, src_dtype) in enumerate(ckpt.read(wanted)):
        arr = np.ascontiguousarray(arr)  # docs/methods.md §0 pitfall: never save a Fortran-ordered view
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            nonfinite.append(k)
        tensors[k] = arr
        dtypes[k] = src_dtype
        if (i + 1) % 50 == 0:
            log(f"[fetch {model}] {i + 1}/{len(wanted)} tensors")
    _check_layers(adapter, fields, tensors, model)
    return AttentionTensors(fmt, adapter, fields, tensors, dtypes, nonfinite)


def _extract(ckpt, out_dir: Path, model: str, source: dict, log, architecture=None) -> dict:
    att = read_attention(ckpt, model, architecture, log)
    files = source.get("files") or [{"name": Path(f).name, "sha256": sha256_file(f), "size": Path(f).stat().st_size}
                                    for f in ckpt.files()]
    return write_attention(att, out_dir, model, source, ckpt.config, files, len(ckpt.keys()), log)


def write_attention(att: AttentionTensors, out_dir: Path, model: str, source: dict, config: dict, files: list,
                    n_keys: int, log=print) -> dict:
    """Write a store of the tensors ``read_attention`` selected (``config``: the checkpoint's
    config; ``files``: its files' records; ``n_keys``: how many tensors it holds): what the fetch
    writes, and what headgeom.api runs the jobs on for a model held in memory."""
    from safetensors.numpy import save_file

    fmt, adapter, fields, tensors, nonfinite = att.fmt, att.adapter, att.fields, att.tensors, att.nonfinite
    entries = {
        k: {"source_dtype": att.source_dtypes[k], "dtype": str(arr.dtype), "shape": list(arr.shape),
            "sha256": sha256_bytes(arr)}
        for k, arr in tensors.items()
    }
    out_dir = Path(out_dir)
    mpath, tpath = out_dir / MANIFEST, out_dir / TENSORS
    # Both files are written in full before either is renamed into place, and an old manifest
    # is withdrawn just before the new tensors replace the old ones: a full disk or a kill at
    # any point leaves either the old store, or no manifest (incomplete: fetched again), or
    # the new store; never a manifest that describes other tensors.
    with atomic_path(mpath) as tmp_m, atomic_path(tpath, before_replace=lambda: mpath.unlink(missing_ok=True)) as tmp_t:
        _save(save_file, tensors, tmp_t)
        manifest = _manifest(model, fmt, adapter, fields, source, config, files, entries, nonfinite, tmp_t)
        tmp_m.write_text(json.dumps(manifest, indent=1, sort_keys=True, default=json_default) + "\n")
    log(
        f"[fetch {model}] {len(tensors)} tensors ({sum(a.nbytes for a in tensors.values()) / 2**20:.1f} MiB) "
        f"of {n_keys}; adapter {adapter.name}; {fields.n_layers} layers, H={fields.n_heads}, "
        f"G={fields.n_kv_heads}, d_model={fields.d_model}, d_head={fields.d_head}"
        + (f"; WARNING non-finite values in {nonfinite}" if nonfinite else "")
    )
    return manifest


def _save(save_file, tensors: dict, tmp: Path) -> None:
    """safetensors reports I/O failures (a full disk) as SafetensorError: make them OSErrors,
    so atomic_path names the store file in the message."""
    try:
        save_file(tensors, str(tmp))
    except OSError:
        raise
    except Exception as e:
        m = re.search(r"os error (\d+)", str(e))
        if m is None:
            raise
        code = int(m.group(1))
        raise OSError(code, f"{os.strerror(code)} ({e})") from e


def _manifest(model, fmt, adapter, fields, source, config, files, entries, nonfinite, tensors_file: Path) -> dict:
    return {
        "schema": STORE_SCHEMA,
        "model": model,
        "format": fmt,
        "adapter": adapter.name,
        "fields": fields.to_dict(),
        "source": source,
        "files": files,
        "config": _jsonable(config),
        "tensors": entries,
        "nonfinite_tensors": nonfinite,
        "store_sha256": sha256_file(tensors_file),
        "store_size": tensors_file.stat().st_size,
        "headgeom_version": __version__,
    }


def _check_layers(adapter, fields: ArchFields, tensors: dict, model: str) -> None:
    """Every layer must have its tensors: catch a truncated index or a wrong config early."""
    missing = []
    for layer in range(fields.n_layers):
        try:
            adapter.layer_factors(lambda k: _get_or_raise(tensors, k), fields, layer)
        except KeyError as e:
            missing.append(f"layer {layer}: {e.args[0]}")
    if missing:
        raise CheckpointError(f"{model}: checkpoint lacks tensors the adapter needs: " + "; ".join(missing[:5]))


def _get_or_raise(tensors, k):
    if k not in tensors:
        raise KeyError(k)
    return tensors[k].astype(np.float64)


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def verify_store(path: str | Path, full: bool = True) -> list[str]:
    """Problems found in the tensor store at ``path`` (an empty list: it is sound).

    Always (cheap): the manifest parses; tensors.safetensors exists, has the size the manifest
    records (stores written since the size is recorded) and a readable safetensors header that
    lists every manifest tensor with its shape. With ``full``: the file's sha256 equals the
    manifest's ``store_sha256`` (reads the whole store)."""
    from safetensors import safe_open

    path = Path(path)
    mpath, tpath = path / MANIFEST, path / TENSORS
    if not mpath.exists():
        return [f"{mpath} is missing (the fetch did not finish)"]
    try:
        manifest = json.loads(mpath.read_text())
        entries = manifest["tensors"]
        ArchFields(**manifest["fields"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{mpath} is unreadable ({type(e).__name__}: {e})"]
    if not tpath.exists():
        return [f"{tpath} is missing"]
    problems = []
    size = tpath.stat().st_size
    if manifest.get("store_size") is not None and size != manifest["store_size"]:
        problems.append(f"{tpath} is {size} bytes, the manifest says {manifest['store_size']} (truncated or overwritten)")
    try:
        with safe_open(str(tpath), "np") as fh:
            keys = set(fh.keys())
            for k, e in entries.items():
                if k not in keys:
                    problems.append(f"tensor {k} is missing from {tpath}")
                elif list(fh.get_slice(k).get_shape()) != list(e["shape"]):
                    problems.append(f"tensor {k} has shape {fh.get_slice(k).get_shape()}, the manifest says {e['shape']}")
    except Exception as e:  # safetensors raises its own error types
        problems.append(f"{tpath} is unreadable ({e})")
    if full and not problems and manifest.get("store_sha256") and sha256_file(tpath) != manifest["store_sha256"]:
        problems.append(f"{tpath} does not match the manifest's store_sha256")
    return problems


class TensorStore:
    """Read side of the store. It is checked when opened (``verify_store(full=False)``) and
    every tensor against its manifest sha256 when read; a corrupt store raises IntegrityError
    with the command that fetches it again."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        mpath = self.path / MANIFEST
        if not mpath.exists():
            raise CheckpointError(
                f"tensor store {self.path} has no manifest (its fetch did not finish); "
                f"fetch it: snakemake --forcerun {mpath}"
            )
        problems = verify_store(self.path, full=False)
        if problems:
            self._corrupt("; ".join(problems))
        self.manifest = json.loads(mpath.read_text())
        self.fields = ArchFields(**self.manifest["fields"])
        name = self.manifest["adapter"]
        # an architecture derived from transformers' modules (headgeom.architectures.derive) has no registry entry
        self.adapter = by_name(name) if name in ADAPTERS else adapter_for(self.manifest["config"], self.manifest["format"])
        self._fh = None

    def _corrupt(self, reason: str):
        raise IntegrityError(
            f"tensor store {self.path} is corrupt: {reason}. Fetch it again with "
            f"`snakemake --forcerun {self.path / MANIFEST}` (add your usual flags and --configfile): that "
            "reruns its fetch and every job computed from it."
        )

    def _open(self):
        from safetensors import safe_open

        if self._fh is None:
            try:
                self._fh = safe_open(str(self.path / TENSORS), "np")
            except Exception as e:
                self._corrupt(f"{self.path / TENSORS} is unreadable ({e})")
        return self._fh

    def release(self) -> None:
        """Close the memory-mapped tensor file: pages read so far stop counting toward this
        process's resident memory (jobs that read many layers call it after each layer)."""
        self._fh = None

    def get(self, key: str) -> np.ndarray:
        entry = self.manifest["tensors"].get(key)
        if entry is None:
            raise KeyError(key)
        try:
            arr = self._open().get_tensor(key)
        except IntegrityError:
            raise
        except Exception as e:
            self._corrupt(f"tensor {key} is unreadable ({e})")
        if sha256_bytes(np.ascontiguousarray(arr)) != entry["sha256"]:
            self._corrupt(f"tensor {key} does not match its manifest sha256")
        return arr.astype(np.float64)

    def layer_tensors(self, layer: int) -> dict[str, str]:
        """name -> sha256 of the tensors one layer's factors come from (for provenance)."""
        pat = re.compile(rf"(^|\.)(layer|layers|blk|h)\.{layer}\.")
        return {k: v["sha256"] for k, v in self.manifest["tensors"].items() if pat.search(k)}

    def layer_factors(self, layer: int) -> LayerFactors:
        if not 0 <= layer < self.fields.n_layers:
            raise IndexError(f"layer {layer} out of range (model has {self.fields.n_layers})")
        return self.adapter.layer_factors(self.get, self.fields, layer)

    def provenance(self) -> dict:
        m = self.manifest
        return {
            "model": m["model"],
            "source": m["source"],
            "files": m["files"],
            "adapter": m["adapter"],
            "store_sha256": m["store_sha256"],
        }
