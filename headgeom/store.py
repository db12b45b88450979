"""The tensor store: per model, only the attention and pre-attention-norm tensors, in one
safetensors file, with a manifest that says where every byte came from.

    results/tensors/{model}/tensors.safetensors
    results/tensors/{model}/manifest.json   (written last: its presence means "complete")
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from . import __version__
from .adapters import ArchFields, adapter_for, by_name
from .errors import CheckpointError, IntegrityError
from .factors import LayerFactors
from .io import atomic_path, sha256_bytes, sha256_file, write_json

MANIFEST = "manifest.json"
TENSORS = "tensors.safetensors"
STORE_SCHEMA = 1


def extract(ckpt, out_dir: str | Path, model: str, source: dict, log=print) -> dict:
    """Copy the tensors the architecture's adapter needs from ``ckpt`` into a store."""
    from safetensors.numpy import save_file

    out_dir = Path(out_dir)
    fmt = "gguf" if ckpt.__class__.__name__ == "GGUFFile" else "safetensors"
    adapter = adapter_for(ckpt.config, fmt)
    keys = ckpt.keys()
    fields = adapter.fields(ckpt.config, keys)
    wanted = [k for k in keys if adapter.wanted(k, fields.prefix)]
    if not wanted:
        raise CheckpointError(f"{model}: no attention tensors matched adapter {adapter.name}")
    tensors, entries = {}, {}
    nonfinite = []
    for i, (k, arr, src_dtype) in enumerate(ckpt.read(wanted)):
        arr = np.ascontiguousarray(arr)  # METHODS §0 pitfall: never save a Fortran-ordered view
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            nonfinite.append(k)
        tensors[k] = arr
        entries[k] = {
            "source_dtype": src_dtype,
            "dtype": str(arr.dtype),
            "shape": list(arr.shape),
            "sha256": sha256_bytes(arr),
        }
        if (i + 1) % 50 == 0:
            log(f"[fetch {model}] {i + 1}/{len(wanted)} tensors")
    _check_layers(adapter, fields, tensors, model)
    with atomic_path(out_dir / TENSORS) as tmp:
        save_file(tensors, str(tmp))
    manifest = {
        "schema": STORE_SCHEMA,
        "model": model,
        "format": fmt,
        "adapter": adapter.name,
        "fields": fields.to_dict(),
        "source": source,
        "files": [{"name": Path(f).name, "sha256": sha256_file(f), "size": Path(f).stat().st_size} for f in ckpt.files()]
        if not source.get("files") else source["files"],
        "config": _jsonable(ckpt.config),
        "tensors": entries,
        "nonfinite_tensors": nonfinite,
        "store_sha256": sha256_file(out_dir / TENSORS),
        "headgeom_version": __version__,
    }
    write_json(out_dir / MANIFEST, manifest)
    log(
        f"[fetch {model}] {len(wanted)} tensors ({sum(a.nbytes for a in tensors.values()) / 2**20:.1f} MiB) "
        f"of {len(keys)}; adapter {adapter.name}; {fields.n_layers} layers, H={fields.n_heads}, "
        f"G={fields.n_kv_heads}, d_model={fields.d_model}, d_head={fields.d_head}"
        + (f"; WARNING non-finite values in {nonfinite}" if nonfinite else "")
    )
    return manifest


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


class TensorStore:
    """Read side of the store. Every tensor is checked against its manifest sha256 on read."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        mpath = self.path / MANIFEST
        if not mpath.exists():
            raise CheckpointError(f"tensor store {self.path} has no manifest (fetch did not finish)")
        self.manifest = json.loads(mpath.read_text())
        self.fields = ArchFields(**self.manifest["fields"])
        self.adapter = by_name(self.manifest["adapter"])
        self._fh = None

    def _open(self):
        from safetensors import safe_open

        if self._fh is None:
            try:
                self._fh = safe_open(str(self.path / TENSORS), "np")
            except Exception as e:
                raise IntegrityError(
                    f"{self.path / TENSORS} is unreadable ({e}); delete {self.path} and rerun to refetch"
                ) from e
        return self._fh

    def get(self, key: str) -> np.ndarray:
        entry = self.manifest["tensors"].get(key)
        if entry is None:
            raise KeyError(key)
        try:
            arr = self._open().get_tensor(key)
        except Exception as e:
            raise IntegrityError(f"{self.path}: tensor {key} unreadable ({e}); delete the store and rerun") from e
        if sha256_bytes(np.ascontiguousarray(arr)) != entry["sha256"]:
            raise IntegrityError(
                f"{self.path}: tensor {key} does not match its manifest sha256; the store is corrupt. "
                f"Delete {self.path} and rerun to refetch."
            )
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
