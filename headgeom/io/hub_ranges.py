"""A safetensors checkpoint on the Hugging Face hub read by byte ranges (the online half of
headgeom.io.hub, which picks it when HF_HUB_OFFLINE is not set).

Nothing is downloaded whole except ``config.json`` and the shard index. The revision is resolved to
a commit sha once (``/api/models/{repo}/revision/{rev}``) and every later request is pinned to that
commit; each shard's safetensors header is read with two small Range requests, and ``read(keys)``
fetches only the byte ranges of the requested tensors (adjacent ranges of a shard coalesced into one
request). A connection that drops mid-transfer is resumed from the bytes already received.
(huggingface_hub's ``parse_safetensors_file_metadata`` is not used: it always asks for the first
100 kB of a shard, more than a small model's attention weights, and ``get_safetensors_metadata``
also writes the index into the HF cache as a partial snapshot.) Callers choose the tensors:
``keys()`` then ``read(subset)``, which is what ``store.extract`` does, so an attention-only store
costs roughly the attention bytes.

HF_TOKEN (or a saved token) is sent through huggingface_hub's own headers; it is never written
into ``source`` or a log line. HF_ENDPOINT, proxies and timeouts are huggingface_hub's.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import time
from dataclasses import dataclass
from typing import Callable, Iterator
from urllib.parse import quote, urlsplit, urlunsplit

import numpy as np

from headgeom.io.checkpoint import PICKLE_NAMES, check_safetensors_header, read_config_json, read_weight_map
from headgeom.core.errors import CheckpointError, IntegrityError
from headgeom.io.files import sha256_bytes

# the files of an HF-layout repo that name its weights
CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"

# Retry policy for every request: exponential backoff RETRY_BASE_S * 2**(n-1), capped at
# RETRY_MAX_S, at most MAX_RETRIES consecutive failures without progress (a retry that
# receives bytes resets the count, so a flaky link still finishes).
MAX_RETRIES = 6
RETRY_BASE_S = 1.0
RETRY_MAX_S = 30.0
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# Two wanted tensors of a shard share one request when at most MAX_GAP bytes lie between them
# (0: only truly adjacent ranges), and one request never spans more than MAX_REQUEST_BYTES
# (a request always holds at least one whole tensor).
MAX_GAP = 0
MAX_REQUEST_BYTES = 256 << 20
MAX_HEADER_BYTES = 100 << 20

#: a commit sha as the hub writes it
COMMIT_RE = re.compile(r"[0-9a-f]{40}")

# safetensors dtype -> (numpy dtype of the stored little-endian bytes, name reported as the
# source dtype; the same names SafetensorsDir reports, so a store is identical either way).
DTYPES = {
    "F64": ("<f8", "float64"),
    "F32": ("<f4", "float32"),
    "F16": ("<f2", "float16"),
    "BF16": ("<u2", "bfloat16"),
    "I64": ("<i8", "int64"),
    "I32": ("<i4", "int32"),
    "I16": ("<i2", "int16"),
    "I8": ("i1", "int8"),
    "U8": ("u1", "uint8"),
    "BOOL": ("?", "bool"),
}


# --------------------------------------------------------------------------- online: byte ranges


class _Transient(Exception):
    """A response worth retrying (429, 5xx, or a body shorter than announced)."""


@dataclass(frozen=True)
class _Tensor:
    shard: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offsets in the shard file, [start, end)
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _content_range_start(value: str | None) -> int | None:
    m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", value or "")
    return int(m.group(1)) if m else None


def _public_url(url: str) -> str:
    """An endpoint URL without any user:password part, fit for a manifest."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _total_size(resp) -> int | None:
    """The whole file's length from a response: Content-Range ``bytes a-b/TOTAL`` of a 206, or
    Content-Length of a 200 that ignored Range. None when the server says neither."""
    if resp is None:
        return None
    m = re.fullmatch(r"\s*bytes\s+\d+-\d+/(\d+)\s*", resp.headers.get("Content-Range") or "")
    if m:
        return int(m.group(1))
    if resp.status_code == 200 and (resp.headers.get("Content-Length") or "").isdigit():
        return int(resp.headers["Content-Length"])
    return None


def parse_header(raw: bytes, size: int | None, where: str, shard: str = "") -> dict[str, "_Tensor"]:
    """A shard's safetensors header -> tensor byte ranges (absolute offsets), checked by
    ``checkpoint.check_safetensors_header``: exact Python-int shape products, non-negative
    dims, spans inside the file (whose size must be known) and not overlapping."""
    base = 8 + len(raw)
    return {k: _Tensor(shard, dtype, shape, base + b, base + e)
            for k, (dtype, shape, b, e) in check_safetensors_header(raw, size, where).items()}


def decode(raw, dtype: str, shape) -> np.ndarray:
    """Little-endian safetensors bytes -> a native-order numpy array that owns its memory.
    BF16 is widened to float32 exactly (its 16 bits are the top half of a float32)."""
    if dtype not in DTYPES:
        raise CheckpointError(f"tensor dtype {dtype} is not supported (supported: {sorted(DTYPES)})")
    stored = np.dtype(DTYPES[dtype][0])
    shape = tuple(int(s) for s in shape)
    if len(raw) == 0:
        a = np.empty(0, dtype=stored)
    else:
        a = np.frombuffer(raw, dtype=stored)
    if dtype == "BF16":
        out = (a.astype(np.uint32) << 16).view(np.float32)
    else:
        out = a.astype(stored.newbyteorder("="), copy=True)
    return out.reshape(shape)


class HubCheckpoint:
    """A safetensors checkpoint on the hub, read by byte ranges at one pinned commit."""

    def __init__(
        self,
        repo_id: str,
        revision: str = "main",
        *,
        log: Callable[[str], None] = print,
        expected_sha256: dict[str, str] | None = None,
    ):
        from huggingface_hub import ModelInfo, constants, get_session
        from huggingface_hub.utils import build_hf_headers

        self.repo_id = repo_id
        self.revision = revision
        self.log = log
        self._expected = dict(expected_sha256 or {})
        self._endpoint = constants.ENDPOINT.rstrip("/")
        self._timeout = constants.HF_HUB_DOWNLOAD_TIMEOUT
        self._session = get_session()
        # user-agent + Authorization (HF_TOKEN / saved token) as huggingface_hub builds them.
        # Kept private: never logged, never copied into ``source``.
        self._http_headers = build_hf_headers()
        self._http_headers["Accept-Encoding"] = "identity"  # byte offsets must be the file's
        self._warned_no_range = False
        self.source: dict = {
            "type": "hf",
            "repo_id": repo_id,
            "revision": revision,
            "commit_sha": None,
            "endpoint": _public_url(self._endpoint),
            "files": [],
            "bytes_fetched": 0,
            "bytes_total": None,
            "tensors_fetched": 0,
            "transfer": "partial (HTTP byte ranges of the tensors read)",
            "integrity": "config/index: git blob sha1 from the hub; tensors: dtype, shape and byte length "
            "against the shard header" + ("; sha256 of expected tensors" if self._expected else ""),
        }

        # 1. revision -> commit sha, with the file list (sizes, git oids, LFS sha256).
        url = f"{self._endpoint}/api/models/{repo_id}/revision/{quote(revision, safe='')}"
        body, _ = self._fetch(url, f"model info of {repo_id}@{revision}", params={"blobs": True})
        try:
            info = ModelInfo(**json.loads(body))
        except Exception as e:
            raise CheckpointError(f"the hub's model info for {repo_id}@{revision} is unreadable: {e}") from e
        commit = info.sha or ""
        if not COMMIT_RE.fullmatch(commit):
            raise CheckpointError(f"the hub did not resolve {repo_id}@{revision} to a commit sha (got {commit!r})")
        self.commit = commit
        self.source["commit_sha"] = commit
        self._siblings = {s.rfilename: s for s in (info.siblings or [])}
        if not self._siblings:
            raise CheckpointError(f"the hub listed no files for {repo_id}@{commit}")

        # 2. config.json and the shard layout.
        if CONFIG not in self._siblings:
            raise CheckpointError(f"{repo_id}@{commit} has no config.json (expected an HF-layout repo)")
        raw_cfg = self._get_small_file(CONFIG)
        self.config = read_config_json(raw_cfg, f"{repo_id}@{commit}: config.json")
        small = {CONFIG: raw_cfg}
        weight_map: dict[str, str] | None = None
        if INDEX in self._siblings:
            small[INDEX] = self._get_small_file(INDEX)
            weight_map = read_weight_map(small[INDEX], f"{repo_id}@{commit}: {INDEX}")
            shards = sorted(set(weight_map.values()))
        elif SINGLE in self._siblings:
            shards = [SINGLE]
        else:
            others = sorted(n for n in self._siblings if n.endswith(".safetensors") and "/" not in n)
            pickles = [n for n in PICKLE_NAMES if n in self._siblings]
            if pickles and not others:
                raise CheckpointError(
                    f"{repo_id}@{commit} holds only pickle-format weights ({', '.join(pickles)}); "
                    "headgeom never unpickles model files."
                )
            if len(others) != 1:
                raise CheckpointError(f"{repo_id}@{commit} has no {SINGLE} or {INDEX}")
            shards = others
        for s in shards:
            if s not in self._siblings:
                raise CheckpointError(f"{repo_id}@{commit}: shard {s} named by the index is not in the repo")

        # 3. shard headers -> tensor byte ranges.
        self._tensors: dict[str, _Tensor] = {}
        per_shard = {s: self._read_header(s) for s in shards}
        if weight_map is not None:
            for k, s in weight_map.items():
                if k not in per_shard[s]:
                    raise CheckpointError(f"{repo_id}@{commit}: the index puts {k} in {s}, whose header lacks it")
                self._tensors[k] = per_shard[s][k]
        else:
            self._tensors = dict(per_shard[shards[0]])
        self._shards = shards

        files = []
        for name in list(small) + shards:
            sib = self._siblings[name]
            if name in small:
                entry = {"name": name, "sha256": hashlib.sha256(small[name]).hexdigest(), "size": len(small[name])}
            else:
                lfs = sib.lfs
                entry = {
                    "name": name,
                    "sha256": lfs.sha256 if lfs is not None else None,
                    "size": lfs.size if lfs is not None else sib.size,
                }
            if sib.blob_id:
                entry["git_oid"] = sib.blob_id
            files.append(entry)
        self.source["files"] = files
        self.source["bytes_total"] = sum(f["size"] or 0 for f in files if f["name"] in shards)
        self.log(
            f"[hub {repo_id}] {revision} -> {commit}: {len(self._tensors)} tensors in {len(shards)} shard(s), "
            f"{self._mib(self.source['bytes_total'])} MiB; metadata cost {self.source['bytes_fetched']} bytes"
        )

    # ---------------------------------------------------------------- SafetensorsDir interface

    def keys(self) -> list[str]:
        return list(self._tensors)

    def files(self) -> list[str]:
        return list(self._shards)

    def source_dtype(self, key: str) -> str:
        d = self._tensors[key].dtype
        return DTYPES[d][1] if d in DTYPES else d

    def tensor_nbytes(self, keys) -> int:
        return sum(self._tensors[k].nbytes for k in dict.fromkeys(keys))

    def read(self, keys: list[str]) -> Iterator[tuple[str, np.ndarray, str]]:
        """Yield (key, array, source dtype) fetching only these tensors' bytes; bfloat16 is
        widened to float32 exactly. Keys come back grouped by shard and byte offset."""
        keys = list(dict.fromkeys(keys))
        missing = [k for k in keys if k not in self._tensors]
        if missing:
            raise CheckpointError(f"{self.repo_id}@{self.commit} has no tensor(s) {missing[:5]}")
        for k in keys:
            if self._tensors[k].dtype not in DTYPES:
                raise CheckpointError(f"{self.repo_id}: tensor {k} has unsupported dtype {self._tensors[k].dtype}")
        before = self.source["bytes_fetched"]
        wanted = self.tensor_nbytes(keys)
        for shard in self._shards:
            ts = sorted((k for k in keys if self._tensors[k].shard == shard), key=lambda k: self._tensors[k].start)
            for group in self._coalesce(ts):
                g0, g1 = self._tensors[group[0]].start, self._tensors[group[-1]].end
                what = f"{shard} bytes {g0}-{g1 - 1} ({len(group)} tensor(s))"
                buf, _ = self._fetch(self._file_url(shard), what, start=g0, end=g1)
                view = memoryview(buf)
                for k in group:
                    t = self._tensors[k]
                    raw = view[t.start - g0 : t.end - g0]
                    if len(raw) != t.nbytes:
                        raise IntegrityError(f"{self.repo_id}: got {len(raw)} bytes for {k}, its header says {t.nbytes}")
                    arr = decode(raw, t.dtype, t.shape)
                    exp = self._expected.get(k)
                    if exp is not None and sha256_bytes(np.ascontiguousarray(arr)) != exp:
                        raise IntegrityError(
                            f"{self.repo_id}@{self.commit}: tensor {k} does not match its expected sha256"
                        )
                    self.source["tensors_fetched"] += 1
                    yield k, arr, DTYPES[t.dtype][1]
                del view, buf
        got = self.source["bytes_fetched"] - before
        total = self.source["bytes_fetched"]
        self.log(
            f"[hub {self.repo_id}] fetched {self._mib(got)} MiB for {len(keys)} tensors "
            f"({self._mib(wanted)} MiB of tensor data); {self._mib(total)} MiB in all of a "
            f"{self._mib(self.source['bytes_total'])} MiB checkpoint "
            f"({100 * total / max(1, self.source['bytes_total']):.2f}%)"
        )

    # ---------------------------------------------------------------- internals

    @staticmethod
    def _mib(n) -> str:
        return f"{(n or 0) / 2**20:.2f}"

    def _coalesce(self, keys: list[str]) -> list[list[str]]:
        groups: list[list[str]] = []
        for k in keys:
            t = self._tensors[k]
            if groups:
                g = groups[-1]
                g0, g1 = self._tensors[g[0]].start, self._tensors[g[-1]].end
                if 0 <= t.start - g1 <= MAX_GAP and t.end - g0 <= MAX_REQUEST_BYTES:
                    g.append(k)
                    continue
            groups.append([k])
        return groups

    def _file_url(self, name: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, name, revision=self.commit, endpoint=self._endpoint)

    def _count(self, n: int) -> None:
        self.source["bytes_fetched"] += n

    def _get_small_file(self, name: str) -> bytes:
        """A whole (small, git-stored) file at the pinned commit, checked against its git oid."""
        data, resp = self._fetch(self._file_url(name), name)
        for r in [*resp.history, resp]:
            c = r.headers.get("X-Repo-Commit")
            if c is not None and c != self.commit:
                raise CheckpointError(f"{self.repo_id}: asked for {name} at {self.commit}, the hub served {c}")
        sib = self._siblings[name]
        if sib.lfs is not None:
            if hashlib.sha256(data).hexdigest() != sib.lfs.sha256:
                raise IntegrityError(f"{self.repo_id}@{self.commit}: {name} does not match its LFS sha256")
        elif sib.blob_id and COMMIT_RE.fullmatch(sib.blob_id) and _git_blob_sha1(data) != sib.blob_id:
            raise IntegrityError(f"{self.repo_id}@{self.commit}: {name} does not match its git blob id")
        return bytes(data)

    def _read_header(self, shard: str) -> dict[str, _Tensor]:
        sib = self._siblings[shard]
        size = sib.lfs.size if sib.lfs is not None else sib.size
        url = self._file_url(shard)
        if size is not None and size < 8:
            raise CheckpointError(f"{self.repo_id}: {shard} is {size} bytes, too small for safetensors")
        prefix, resp = self._fetch(url, f"{shard} header length", start=0, end=8)
        if size is None:  # the hub listed no size: take the file's length from the response
            size = _total_size(resp)
        (n,) = struct.unpack("<Q", bytes(prefix))
        if n > MAX_HEADER_BYTES or (size is not None and 8 + n > size):
            raise CheckpointError(f"{self.repo_id}: {shard} has an impossible safetensors header length {n}")
        raw, _ = self._fetch(url, f"{shard} header", start=8, end=8 + n)
        return parse_header(bytes(raw), size, f"{self.repo_id}: {shard}", shard)

    def _fetch(self, url: str, what: str, *, params=None, start: int = 0, end: int | None = None):
        """GET ``url`` — bytes [start, end) when ``end`` is given, else the whole body — retrying
        transient failures with exponential backoff and resuming a dropped transfer from the
        bytes already received. Returns (bytearray, last response)."""
        import httpx2
        from huggingface_hub.errors import HfHubHTTPError
        from huggingface_hub.utils import hf_raise_for_status

        buf = bytearray()
        expected = None if end is None else end - start
        if expected is not None and expected <= 0:
            return buf, None  # zero-size tensors: nothing to ask for
        failures = 0
        while True:
            pos = start + len(buf)
            ranged = end is not None or len(buf) > 0
            headers = dict(self._http_headers)
            if ranged:
                headers["Range"] = f"bytes={pos}-" + ("" if end is None else str(end - 1))
            progressed = False
            try:
                with self._session.stream("GET", url, headers=headers, params=params, timeout=self._timeout) as resp:
                    if resp.status_code in RETRY_STATUS:
                        resp.read()
                        self._count(len(resp.content))
                        raise _Transient(f"HTTP {resp.status_code}")
                    if resp.status_code >= 400:
                        resp.read()
                        self._count(len(resp.content))
                        hf_raise_for_status(resp)
                    skip = 0
                    if ranged and resp.status_code == 206:
                        got = _content_range_start(resp.headers.get("Content-Range"))
                        if got != pos:
                            raise CheckpointError(f"{self.repo_id}: {what}: asked for byte {pos}, the server sent {got}")
                    elif ranged and resp.status_code == 200:
                        skip = pos  # the server ignored Range: read past what we have
                        if not self._warned_no_range:
                            self._warned_no_range = True
                            self.log(f"[hub {self.repo_id}] WARNING: the server ignored a Range request ({what})")
                    elif resp.status_code != 200:
                        raise CheckpointError(f"{self.repo_id}: {what}: unexpected HTTP {resp.status_code}")
                    if expected is None and not ranged and resp.headers.get("Content-Length") is not None:
                        expected = int(resp.headers["Content-Length"])
                    for chunk in resp.iter_bytes():
                        self._count(len(chunk))
                        if skip:
                            cut = min(skip, len(chunk))
                            chunk, skip = chunk[cut:], skip - cut
                        if expected is not None:
                            chunk = chunk[: expected - len(buf)]
                        if chunk:
                            buf += chunk
                            progressed = True
                        if expected is not None and len(buf) == expected:
                            break  # all asked for (a server ignoring Range may send more)
                if expected is None or len(buf) == expected:
                    return buf, resp
                raise _Transient(f"body ended after {len(buf)} of {expected} bytes")
            except (httpx2.TransportError, _Transient) as e:
                failures = 1 if progressed else failures + 1
                if failures > MAX_RETRIES:
                    raise CheckpointError(
                        f"{self.repo_id}@{self.revision}: {what}: giving up after {MAX_RETRIES} retries ({e})"
                    ) from e
                delay = min(RETRY_BASE_S * 2 ** (failures - 1), RETRY_MAX_S)
                self.log(
                    f"[hub {self.repo_id}] {what}: {type(e).__name__}: {e}; have {len(buf)}"
                    + (f" of {expected}" if expected is not None else "")
                    + f" bytes, resuming from byte {start + len(buf)} in {delay:.2f}s"
                )
                time.sleep(delay)
            except HfHubHTTPError as e:
                raise CheckpointError(f"{self.repo_id}@{self.revision}: {what}: {e}") from e
