"""Reading checkpoints: HF-layout safetensors directories (single file or sharded with an
index) and GGUF files. Pickle formats are refused, never loaded."""

from __future__ import annotations

import functools
import json
import struct
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
        self.config = read_config_json(cfg.read_bytes(), str(cfg))
        index = self.path / "model.safetensors.index.json"
        single = self.path / "model.safetensors"
        if index.exists():
            wm = read_weight_map(index.read_bytes(), str(index))
            self.key_file = {k: contained(self.path, v, f"shard of {index}") for k, v in wm.items()}
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
        for f in set(self.key_file.values()):
            check_safetensors_file(f)

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
        """Yield (key, array, source dtype); bfloat16 is widened to float32 exactly. Tensors are
        read with pread(2) into memory of their own, not served from a memory map of the file: a
        mapped file's pages that were read stay resident while any tensor of it lives, so the
        fetch's peak grew with the file layout (a 1.6 GB file added its whole size); read this
        way it is the tensors the fetch keeps (schedule.costs.fetch)."""
        from safetensors import safe_open

        by_file: dict[Path, list[str]] = {}
        for k in keys:
            by_file.setdefault(self.key_file[k], []).append(k)
        for f, ks in by_file.items():
            try:
                with safe_open(str(f), "pt", backend="pread") as fh:
                    for k in ks:
                        yield (k, *_numpy_of(fh.get_tensor(k)))
            except CheckpointError:
                raise
            except Exception as e:
                raise CheckpointError(f"could not read tensors from {f}: {e}") from e


def _torch():
    import torch

    return torch


def _numpy_of(t) -> tuple[np.ndarray, str]:
    """(array, source dtype) of a torch tensor: bfloat16 and other float formats numpy lacks are
    widened to float32 exactly; float16/32/64 are kept."""
    src = str(t.dtype).replace("torch.", "")
    if t.dtype.is_floating_point and t.dtype not in (_torch().float32, _torch().float64, _torch().float16):
        t = t.float()
    return t.numpy(), src


class ModelInMemory:
    """A transformers model object as a checkpoint (the SafetensorsDir interface): its
    ``state_dict()`` and its config (``config.to_json_string``, what ``save_pretrained`` writes
    as config.json, with defaults). Tensors are copied when read: later changes to the model do
    not reach them. Nothing is written to disk."""

    def __init__(self, model):
        try:
            self.state = model.state_dict()
            self.config = read_config_json(model.config.to_json_string(use_diff=False).encode(), "the model's config")
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"{type(model).__name__} has no usable state_dict() and config: "
                                  f"{type(e).__name__}: {e}") from e
        self.name = type(model).__name__

    def keys(self) -> list[str]:
        return list(self.state)

    def files(self) -> list[Path]:
        return []

    def read(self, keys: list[str]) -> Iterator[tuple[str, np.ndarray, str]]:
        for k in keys:
            t = self.state[k].detach()
            if t.device.type == "meta":
                raise CheckpointError(f"{self.name}: tensor {k} is on the meta device (the model holds no weights)")
            if not t.dtype.is_floating_point:
                raise CheckpointError(f"{self.name}: tensor {k} is {t.dtype} (a quantized model?); "
                                      "load it unquantized")
            arr, src = _numpy_of(t.cpu())
            yield k, np.array(arr, copy=True), src


def gguf_reader(path, mode: str = "r", base=None):
    """``gguf.GGUFReader(path, mode)`` (or ``base``, a subclass of it), parsed over a plain ndarray
    view of its memory map. The reader slices its map once or twice per metadata element, and
    numpy.memmap's slicing runs Python code (``__getitem__``, ``__array_finalize__``) that a plain
    view does not: Gemma-3-270M's 262k-token vocabulary parses in about 3.5 CPU-s instead of 10.
    The fields, tensors and their bytes are the same; the views are ndarrays, not memmaps."""
    if base is None:
        import gguf

        base = gguf.GGUFReader
    return _over_plain_view(base)(str(path), mode)


@functools.cache
def _over_plain_view(base):
    def get(self):
        return self.__dict__["_plain_data"]

    def put(self, value):  # GGUFReader.__init__ assigns its np.memmap here, then parses through it
        self.__dict__["_plain_data"] = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    return type(f"Plain{base.__name__}", (base,), {"data": property(get, put), "__doc__": gguf_reader.__doc__})


class GGUFFile:
    """A GGUF file; quantized tensors are dequantized to float32 with gguf.quants."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists():
            raise CheckpointError(f"GGUF file {self.path} does not exist")
        check_gguf(self.path)  # counts and extents against the file size, before gguf trusts them
        try:
            self.reader = gguf_reader(self.path)
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
            try:
                arr = dequantize(t.data, t.tensor_type)
                # GGUF lists dims fastest-first; numpy data is already (out, in) like HF.
                shape = tuple(int(x) for x in reversed(t.shape.tolist()))
                arr = np.ascontiguousarray(arr.reshape(shape), dtype=np.float32)
            except Exception as e:  # gguf / numpy errors on a malformed tensor
                raise CheckpointError(f"{self.path}: tensor {k} is unreadable: {type(e).__name__}: {e}") from e
            yield k, arr, t.tensor_type.name


# --------------------------------------------------------------------------- hostile-file checks
# Everything below reads only what the file holds: sizes claimed by a header are compared with
# the bytes that exist before anything is allocated or looped over, and integers are Python ints.


def contained(root: str | Path, name, what: str, err=CheckpointError) -> Path:
    """``root / name`` for a relative ``name`` that stays inside ``root`` once normalized
    (lexically: symlinked blobs, as in the HF cache, are allowed). Anything else raises ``err``."""
    import os

    if not isinstance(name, str) or not name or "\0" in name:
        raise err(f"{what}: {name!r} is not a file name")
    if os.path.isabs(name) or name.startswith("~"):
        raise err(f"{what}: {name!r} is an absolute path, outside {root}")
    base = os.path.normpath(str(root))
    full = os.path.normpath(os.path.join(base, name))
    if full == base or not full.startswith(base.rstrip(os.sep) + os.sep):
        raise err(f"{what}: {name!r} leaves {root} (resolves outside it)")
    return Path(full)


def _json_doc(raw: bytes, failure: str):
    """JSON from bytes someone else wrote; anything unreadable (not UTF-8, not JSON, nested
    past the recursion limit) is a CheckpointError starting with ``failure``."""
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError(f"{failure}: {e}") from e


def read_config_json(raw: bytes, where: str) -> dict:
    """A checkpoint's config.json: a JSON object (local directory or hub alike). Bytes that are
    not UTF-8 JSON, or JSON that is not an object, are a CheckpointError naming the file."""
    doc = _json_doc(raw, f"{where} is not valid JSON")
    if not isinstance(doc, dict):
        raise CheckpointError(f"{where} is not a JSON object (got {type(doc).__name__})")
    return doc


def read_weight_map(raw: bytes, where: str) -> dict[str, str]:
    """The ``weight_map`` of a model.safetensors.index.json: a JSON object of tensor name ->
    shard file name (both strings). Anything else is a CheckpointError naming the file."""
    doc = _json_doc(raw, f"{where}: the shard index is not valid JSON")
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict) or not wm:
        raise CheckpointError(f"{where}: the shard index has no weight_map object of tensor name -> shard file")
    for k, v in wm.items():
        if not isinstance(v, str) or not v:
            raise CheckpointError(f"{where}: the shard index maps {k!r} to {v!r}, not a file name")
    return wm


#: bits per element of every dtype the safetensors format defines (its parser refuses any other name)
SAFETENSORS_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I32": 32, "I16": 16, "I8": 8,
                    "U64": 64, "U32": 32, "U16": 16, "U8": 8, "BOOL": 8, "C64": 64, "F8_E4M3": 8, "F8_E5M2": 8,
                    "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4}
MAX_SAFETENSORS_HEADER = 100 << 20


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_safetensors_header(raw: bytes, file_size: int | None, where: str) -> dict[str, tuple[str, tuple, int, int]]:
    """Validate a safetensors JSON header (the bytes after the 8-byte length) against the file
    size: name -> (dtype, shape, begin, end) with offsets relative to the data section.

    Shapes are non-negative Python ints whose exact product times the item size equals the
    span; spans lie inside the file and do not overlap. ``file_size`` None (unknown) is refused:
    a span cannot be checked against nothing."""
    if file_size is None:
        raise CheckpointError(f"{where}: the file size is unknown, so tensor spans cannot be checked")
    base = 8 + len(raw)
    if base > file_size:
        raise CheckpointError(f"{where}: the safetensors header ({len(raw)} bytes) runs past the end of the file")
    header = _json_doc(raw, f"{where}: safetensors header is not JSON")
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: safetensors header is not a JSON object")
    out, spans = {}, []
    for k, v in header.items():
        if k == "__metadata__":
            continue
        if not isinstance(v, dict):
            raise CheckpointError(f"{where}: header entry {k!r} is not an object")
        dtype, shape, offs = v.get("dtype"), v.get("shape"), v.get("data_offsets")
        if not isinstance(dtype, str):
            raise CheckpointError(f"{where}: header entry {k!r} has dtype {dtype!r}, not a string")
        if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
            raise CheckpointError(f"{where}: header entry {k!r} has shape {shape!r}; want a list of non-negative ints")
        if not (isinstance(offs, list) and len(offs) == 2 and all(_is_int(x) for x in offs) and 0 <= offs[0] <= offs[1]):
            raise CheckpointError(f"{where}: header entry {k!r} has data_offsets {offs!r}; want [begin, end], 0 <= begin <= end")
        b, e = offs
        if base + e > file_size:
            raise CheckpointError(f"{where}: the safetensors header puts {k} at data offsets {b}-{e}, "
                                  f"outside the file ({file_size} bytes: truncated?)")
        n = 1
        for s in shape:
            n *= s  # exact: Python ints never overflow
        bits = SAFETENSORS_BITS.get(dtype)
        if bits is None:  # a damaged header (every entry, read or not: the file is what is checked)
            raise CheckpointError(f"{where}: header entry {k!r} has dtype {dtype!r}, which safetensors does not "
                                  f"define (known: {', '.join(SAFETENSORS_BITS)})")
        if n * bits != 8 * (e - b):
            raise CheckpointError(f"{where}: {k} is {dtype}{shape} = {n * bits / 8:g} bytes but spans {e - b}")
        out[k] = (dtype, tuple(shape), b, e)
        spans.append((b, e, k))
    spans.sort()
    for (b0, e0, k0), (b1, e1, k1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise CheckpointError(f"{where}: tensors {k0} and {k1} overlap")
    return out


def check_safetensors_file(path: str | Path) -> None:
    """Read a local safetensors file's header (8-byte length + JSON) and check it."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise CheckpointError(f"{path} is {size} bytes, too small for a safetensors header")
        (n,) = struct.unpack("<Q", prefix)
        if n > MAX_SAFETENSORS_HEADER or 8 + n > size:
            raise CheckpointError(f"{path} has an impossible safetensors header length {n} ({size} bytes in all)")
        raw = fh.read(n)
    check_safetensors_header(raw, size, str(path))


# GGUF value types -> fixed byte size (STRING = 8, ARRAY = 9 are variable).
_GGUF_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_MAX_DIMS = 8
_GGUF_MAX_DEPTH = 4


def check_gguf(path: str | Path, meta: dict | None = None) -> None:
    """Walk a GGUF file's header with every count and extent checked against the file size
    before it is used (gguf's reader trusts them: a 50-byte file claiming 2^40 array items
    keeps it busy for minutes). Raises CheckpointError; returns None for a sound layout.
    ``meta`` (a dict) receives every metadata key: its value for a string field
    (``general.architecture``), None for the others (the pre-flight check reads it)."""
    import mmap

    from gguf import GGML_QUANT_SIZES

    path = Path(path)
    size = path.stat().st_size
    if size < 24:
        raise CheckpointError(f"{path} is {size} bytes, too small for a GGUF header")
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        pos = 0

        def need(n: int, what: str):
            if n < 0 or pos + n > size:
                raise CheckpointError(f"{path}: {what} at byte {pos} claims {n} bytes, past the end of the file ({size} bytes)")

        if bytes(buf[:4]) != b"GGUF":
            raise CheckpointError(f"{path} is not a GGUF file (bad magic)")
        (version,) = struct.unpack_from("<I", buf, 4)
        end = "<" if version & 0xFFFF else ">"
        if end == ">":
            (version,) = struct.unpack_from(">I", buf, 4)
        if version not in (2, 3):
            raise CheckpointError(f"{path}: GGUF version {version} is not supported (2 or 3)")
        n_tensors, n_kv = struct.unpack_from(end + "QQ", buf, 8)
        pos = 24
        # each KV needs >= 8 + 4 + 1 bytes, each tensor info >= 8 + 4 + 4 + 8
        if n_kv * 13 > size - pos or n_tensors * 24 > size - pos:
            raise CheckpointError(f"{path}: GGUF header claims {n_kv} metadata fields and {n_tensors} tensors, "
                                  f"more than its {size} bytes can hold")

        def u(fmt: str, what: str):
            nonlocal pos
            n = struct.calcsize(fmt)
            need(n, what)
            vals = struct.unpack_from(end + fmt, buf, pos)
            pos += n
            return vals[0] if len(vals) == 1 else vals

        def string(what: str) -> bytes:
            nonlocal pos
            n = u("Q", what)
            need(n, what)
            s = bytes(buf[pos:pos + n])
            pos += n
            return s

        def value(t: int, what: str, depth: int = 0):
            nonlocal pos
            if t in _GGUF_FIXED:
                n = _GGUF_FIXED[t]
                need(n, what)
                pos += n
                return
            if t == 8:
                string(what)
                return
            if t != 9 or depth >= _GGUF_MAX_DEPTH:
                raise CheckpointError(f"{path}: {what} has unknown GGUF value type {t}")
            it, count = u("I", what), u("Q", what)
            if it in _GGUF_FIXED:
                need(count * _GGUF_FIXED[it], f"{what} ({count} items)")
                pos += count * _GGUF_FIXED[it]
                return
            if it not in (8, 9):
                raise CheckpointError(f"{path}: {what} has unknown GGUF array item type {it}")
            need(count * (8 if it == 8 else 12), f"{what} ({count} items)")  # smallest item first
            for _ in range(count):
                value(it, what, depth + 1)

        alignment = 32
        for i in range(n_kv):
            key = string(f"metadata key {i}")
            t = u("I", f"metadata field {key[:60]!r}")
            start = pos
            value(t, f"metadata field {key[:60]!r}")
            if meta is not None:
                name = key.decode("utf-8", "replace")
                meta[name] = bytes(buf[start + 8:pos]).decode("utf-8", "replace") if t == 8 else None
            if key == b"general.alignment":
                if t != 4:
                    raise CheckpointError(f"{path}: general.alignment is not a uint32")
                (alignment,) = struct.unpack_from(end + "I", buf, start)
                if alignment == 0 or alignment & (alignment - 1):
                    raise CheckpointError(f"{path}: general.alignment {alignment} is not a power of two")
        infos = []
        for i in range(n_tensors):
            name = string(f"tensor info {i}")
            nd = u("I", f"tensor {name[:60]!r}")
            if nd > _GGUF_MAX_DIMS:
                raise CheckpointError(f"{path}: tensor {name[:60]!r} claims {nd} dimensions")
            dims = [u("Q", f"tensor {name[:60]!r}") for _ in range(nd)]
            ttype, off = u("I", f"tensor {name[:60]!r}"), u("Q", f"tensor {name[:60]!r}")
            infos.append((name, dims, ttype, off))
        data = pos + (-pos) % alignment
        for name, dims, ttype, off in infos:
            try:
                block, tsize = GGML_QUANT_SIZES[ttype]
            except (KeyError, ValueError):
                raise CheckpointError(f"{path}: tensor {name[:60]!r} has unknown GGML type {ttype}") from None
            n = 1
            for x in dims:
                n *= x
            if n % block:
                raise CheckpointError(f"{path}: tensor {name[:60]!r} has {n} elements, not a multiple of its block {block}")
            nbytes = n // block * tsize
            if data + off + nbytes > size:
                raise CheckpointError(f"{path}: tensor {name[:60]!r} ({nbytes} bytes at offset {off}) extends past "
                                      f"the end of the file ({size} bytes)")


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


def not_a_checkpoint_file(path: Path) -> str:
    """What is wrong with a model ``path`` that is a file but not a .gguf, from its first bytes:
    pickle-format weights (a pickle stream or torch.save's zip) are refused as such; a file only
    named like them, a lone .safetensors file or anything else is said to be what it is."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(512)
        size = path.stat().st_size
    except OSError as e:
        return f"{path} is unreadable ({e.strerror or e})"
    if head[:1] == b"\x80" or head[:4] == b"PK\x03\x04":
        return (f"{path} is a pickle-format checkpoint; headgeom never unpickles model files. "
                "Use safetensors or GGUF.")
    try:
        what = "text file" if all(c.isprintable() or c.isspace() for c in head.decode("utf-8")) else "file"
    except UnicodeDecodeError:
        what = "binary file"
    if path.suffix == ".safetensors":
        return (f"{path} is a single .safetensors file; give the directory that holds it with its config.json "
                "(an HF-layout checkpoint) or a .gguf file")
    if path.name in PICKLE_NAMES or path.suffix in PICKLE_SUFFIXES:
        return (f"{path} is named like a pickle checkpoint but is a {size}-byte {what}, neither pickle nor "
                "safetensors nor GGUF; give an HF-layout directory or a .gguf file")
    return f"{path} is a {size}-byte {what}, not a checkpoint; expected an HF-layout directory or a .gguf file"


def open_checkpoint(path: str | Path):
    path = Path(path)
    if path.is_file() and path.suffix == ".gguf":
        return GGUFFile(path)
    if path.is_file():
        raise CheckpointError(not_a_checkpoint_file(path))
    return SafetensorsDir(path)
