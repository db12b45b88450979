"""Reading checkpoints: HF-layout safetensors directories (single file or sharded with an
index) and GGUF files. Pickle formats are refused, never loaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np

from headgeom.core.errors import CheckpointError

PICKLE_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth", "tf_model.h5", "flax_model.msgpack")


class SafetensorsDir:
    """An HF-layout directory: config.json + model.safetensors, or shards + index."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise CheckpointError(f"checkpoint directory {self.path} does not exist")
        cfg = self.path / "config.json"
        if not cfg.exists():
            raise CheckpointError(f"{self.path} has no config.json (expected an HF-layout directory)")
        try:
            self.config = json.loads(cfg.read_text())
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{cfg} is not valid JSON: {e}") from e
        index = self.path / "model.safetensors.index.json"
        single = self.path / "model.safetensors"
        if index.exists():
            wm = json.loads(index.read_text())["weight_map"]
            self.key_file = {k: self.path / v for k, v in wm.items()}
        elif single.exists():
            self.key_file = {k: single for k in self._keys_of(single)}
        else:
            others = sorted(p.name for p in self.path.glob("*.safetensors"))
            pickles = [n for n in PICKLE_NAMES if (self.path / n).exists()]
            if pickles and not others:
                raise CheckpointError(
                    f"{self.path} holds only pickle-format weights ({', '.join(pickles)}); "
                    "headgeom never unpickles model files. Convert to safetensors first."
                )
            if len(others) == 1:
                only = self.path / others[0]
                self.key_file = {k: only for k in self._keys_of(only)}
            else:
                raise CheckpointError(f"{self.path} has no model.safetensors or model.safetensors.index.json")
        for f in set(self.key_file.values()):
            if not Path(f).exists():
                raise CheckpointError(f"shard {f} named by the index is missing")

    @staticmethod
    def _keys_of(path: Path) -> list[str]:
        from safetensors import safe_open

        try:
            with safe_open(str(path), "np") as fh:
                return list(fh.keys())
        except Exception as e:  # safetensors raises its own error types
            raise CheckpointError(f"{path} is not a readable safetensors file: {e}") from e

    def keys(self) -> list[str]:
        return list(self.key_file)

    def files(self) -> list[Path]:
        return sorted(set(self.key_file.values()))

    def source_dtype(self, key: str) -> str:
        from safetensors import safe_open

        with safe_open(str(self.key_file[key]), "np") as fh:
            return fh.get_slice(key).get_dtype()

    def read(self, keys: list[str]) -> Iterator[tuple[str, np.ndarray, str]]:
        """Yield (key, array, source dtype); bfloat16 is widened to float32 exactly."""
        from safetensors import safe_open

        by_file: dict[Path, list[str]] = {}
        for k in keys:
            by_file.setdefault(self.key_file[k], []).append(k)
        for f, ks in by_file.items():
            try:
                with safe_open(str(f), "pt") as fh:
                    for k in ks:
                        t = fh.get_tensor(k)
                        src = str(t.dtype).replace("torch.", "")
                        if t.dtype.is_floating_point and t.dtype not in (_torch().float32, _torch().float64, _torch().float16):
                            t = t.float()
                        yield k, t.numpy(), src
            except CheckpointError:
                raise
            except Exception as e:
                raise CheckpointError(f"could not read tensors from {f}: {e}") from e


def _torch():
    import torch

    return torch


class GGUFFile:
    """A GGUF file; quantized tensors are dequantized to float32 with gguf.quants."""

    def __init__(self, path: str | Path):
        from gguf import GGUFReader

        self.path = Path(path)
        if not self.path.exists():
            raise CheckpointError(f"GGUF file {self.path} does not exist")
        try:
            self.reader = GGUFReader(str(self.path))
        except Exception as e:
            raise CheckpointError(f"{self.path} is not a readable GGUF file: {e}") from e
        self.config = {}
        for k, v in self.reader.fields.items():
            if k.startswith("tokenizer.") or k.startswith("GGUF."):
                continue
            try:
                self.config[k] = v.contents()
            except Exception:  # exotic field types are not needed by any adapter
                continue
        self._tensors = {t.name: t for t in self.reader.tensors}

    def keys(self) -> list[str]:
        return list(self._tensors)

    def files(self) -> list[Path]:
        return [self.path]

    def read(self, keys: list[str]) -> Iterator[tuple[str, np.ndarray, str]]:
        from gguf.quants import dequantize

        for k in keys:
            t = self._tensors[k]
            arr = dequantize(t.data, t.tensor_type)
            # GGUF lists dims fastest-first; numpy data is already (out, in) like HF.
            shape = tuple(int(x) for x in reversed(t.shape.tolist()))
            arr = np.ascontiguousarray(arr.reshape(shape), dtype=np.float32)
            yield k, arr, t.tensor_type.name


def open_checkpoint(path: str | Path):
    path = Path(path)
    if path.is_file() and path.suffix == ".gguf":
        return GGUFFile(path)
    if path.is_file() and (path.name in PICKLE_NAMES or path.suffix in (".bin", ".pt", ".pth", ".pkl", ".ckpt")):
        raise CheckpointError(
            f"{path} is a pickle-format checkpoint; headgeom never unpickles model files. "
            "Use safetensors or GGUF."
        )
    return SafetensorsDir(path)
