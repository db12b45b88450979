"""Models from the Hugging Face hub, through huggingface_hub.

``open_hf_checkpoint(repo_id, revision)`` returns (checkpoint, source). The checkpoint has the
SafetensorsDir interface (``config``, ``keys()``, ``files()``, ``read(keys)``) and ``source``
records where the bytes came from: the revision asked for, the commit sha it resolved to, the
checkpoint files with their sha256, and how many bytes were fetched out of the checkpoint's size.

Online, the checkpoint is headgeom.io.hub_ranges.HubCheckpoint: the revision resolved to a commit
sha once, and only the byte ranges of the tensors read fetched (nothing downloaded whole except
``config.json`` and the shard index).

With HF_HUB_OFFLINE=1 it reads a populated HF cache (``snapshot_download(local_files_only=True)``)
and checks each cached file against the sha256 its blob is named by.

``snapshot_for_forward(repo_id, revision)`` is the activation stage's way in: transformers needs
the whole model and its tokenizer as files, so it gets a snapshot of the repo at the revision in
the HF cache (``snapshot_download``; offline from the cache only), with ``forward_allow``: the
weight files of ``ALLOW`` plus the tokenizer files and ``generation_config.json``, never a pickle.

HF_TOKEN (or a saved token) is sent through huggingface_hub's own headers; it is never written
into ``source`` or a log line. HF_ENDPOINT, proxies and timeouts are huggingface_hub's.
"""

from __future__ import annotations

import os
import re
from typing import Callable

from headgeom.io.checkpoint import SafetensorsDir
from headgeom.core.errors import CheckpointError, IntegrityError
from headgeom.io.files import sha256_file
from headgeom.io.hub_ranges import COMMIT_RE, CONFIG, INDEX, HubCheckpoint

ALLOW = [CONFIG, "*.safetensors", INDEX]
GENERATION_CONFIG = "generation_config.json"

_SHA256_RE = re.compile(r"[0-9a-f]{64}")


def _offline() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return True
    from huggingface_hub import constants

    return constants.is_offline_mode()


def _cache_dir(cache_dir) -> str:
    """The HF hub cache, read from the environment at call time (huggingface_hub reads it at
    import), so HF_HOME / HF_HUB_CACHE set after import are honoured too."""
    if cache_dir:
        return str(cache_dir)
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.path.expandvars(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.path.expandvars(os.environ["HF_HOME"])), "hub")
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def open_hf_checkpoint(
    repo_id: str,
    revision: str = "main",
    cache_dir=None,
    *,
    log: Callable[[str], None] = print,
    expected_sha256: dict[str, str] | None = None,
):
    """(checkpoint, source) for ``repo_id@revision``.

    ``expected_sha256`` (optional) maps tensor names to the sha256 of the decoded array's bytes,
    as ``store.extract`` records them in a manifest; every such tensor read is checked against
    it (IntegrityError on mismatch). ``source`` is updated in place while ``read`` runs
    (``bytes_fetched``, ``tensors_fetched``), so a manifest written after reading has the totals.
    """
    if _offline():
        return _open_cached(repo_id, revision, cache_dir, log)
    ckpt = HubCheckpoint(repo_id, revision, log=log, expected_sha256=expected_sha256)
    return ckpt, ckpt.source


# --------------------------------------------------------------------------- offline: HF cache


def _open_cached(repo_id: str, revision: str, cache_dir, log):
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(
            repo_id,
            revision=revision,
            allow_patterns=ALLOW,
            cache_dir=_cache_dir(cache_dir),
            local_files_only=True,
        )
    except Exception as e:
        raise CheckpointError(
            f"could not get {repo_id}@{revision} from the local HF cache "
            f"(HF_HUB_OFFLINE is set and it is not cached there): {e}"
        ) from e
    # snapshot folders are named by the commit sha: that is the resolved revision.
    commit = os.path.basename(os.path.normpath(path))
    if not COMMIT_RE.fullmatch(commit):
        raise CheckpointError(f"cached snapshot {path} is not named by a commit sha")
    ckpt = SafetensorsDir(path)
    names = [CONFIG] + ([INDEX] if os.path.exists(os.path.join(path, INDEX)) else [])
    shards = [os.path.relpath(f, path) for f in ckpt.files()]
    source = _snapshot_record(path, repo_id, revision, commit, names + shards, shards, bytes_fetched=0,
                              transfer="offline (HF cache)")
    total = source["bytes_total"]
    log(f"[hub {repo_id}] offline: cached snapshot {commit} ({total / 2**20:.1f} MiB of weights)")
    return ckpt, source


def _snapshot_record(path: str, repo_id: str, revision: str, commit: str, names, weights, *,
                     transfer: str, bytes_fetched: int | None = None) -> dict:
    """The source record of a cached snapshot: every named file's sha256 and size (checked against
    its blob name), and the weights' bytes."""
    files = _cached_files(path, names, repo_id, commit)
    rec = {"type": "hf", "repo_id": repo_id, "revision": revision, "commit_sha": commit, "files": files}
    if bytes_fetched is not None:
        rec["bytes_fetched"] = bytes_fetched
    rec["bytes_total"] = sum(f["size"] for f in files if f["name"] in weights)
    rec["transfer"] = transfer
    return rec


def _cached_files(path: str, names, repo_id: str, commit: str) -> list[dict]:
    """name, sha256 and size of each of ``names`` in the snapshot folder ``path``; LFS blobs in
    the cache are named by their sha256, so a mismatch is a corrupt cache (IntegrityError)."""
    files = []
    for name in names:
        p = os.path.join(path, name)
        digest = sha256_file(p)
        blob = os.path.basename(os.path.realpath(p))
        if _SHA256_RE.fullmatch(blob) and blob != digest:
            raise IntegrityError(
                f"cached file {name} of {repo_id}@{commit} does not match its sha256 ({blob}); "
                f"delete {os.path.realpath(p)} and fetch again online"
            )
        files.append({"name": name, "sha256": digest, "size": os.path.getsize(p)})
    return files


# --------------------------------------------------------------------------- forward pass: a snapshot


def forward_allow(tokenizer_files) -> list[str]:
    """``snapshot_download`` allow patterns of the activation stage: ``ALLOW`` (config, index,
    safetensors), ``generation_config.json`` and the tokenizer files transformers may read
    (the caller's list, ``headgeom.io.forward.TOKENIZER_FILES``; passed in, as forward imports
    this module). No pickle (*.bin, *.pt, ...) and no code file."""
    return list(dict.fromkeys([*ALLOW, GENERATION_CONFIG, *tokenizer_files]))


def snapshot_for_forward(repo_id: str, revision: str, tokenizer_files, cache_dir=None, *,
                         log: Callable[[str], None] = print) -> tuple[str, dict]:
    """(snapshot folder, source record) of ``repo_id@revision`` for a transformers forward pass.

    Online, ``snapshot_download`` resolves the revision to its commit and fetches the files of
    ``forward_allow(tokenizer_files)`` missing from the HF cache; with HF_HUB_OFFLINE set it reads
    the cache only (``local_files_only``; a snapshot cached without the tokenizer files, e.g. for
    the weight fetch alone, is incomplete and an error). The record is the fetch stage's: type hf, repo_id, the
    revision asked for, the commit sha (the snapshot folder's name) and every snapshot file's
    sha256 (checked against the blob name of LFS files). CheckpointError names repo and revision
    when the repo or revision is not on the hub, the hub is unreachable and nothing is cached,
    or the snapshot holds no config.json / safetensors weights."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    offline = _offline()
    allow = forward_allow(tokenizer_files)
    try:
        path = snapshot_download(repo_id, revision=revision, allow_patterns=allow, cache_dir=_cache_dir(cache_dir),
                                 local_files_only=offline)
    except Exception as e:
        # snapshot_download answers a hub error other than a missing revision by looking in the
        # cache; what the hub said is then the cause of its "not cached" error
        causes, c = [], e
        while c is not None and len(causes) < 10:
            causes.append(c)
            c = c.__cause__ or c.__context__
        if any(isinstance(c, RevisionNotFoundError) for c in causes):
            raise CheckpointError(f"{repo_id}@{revision}: the hub has no revision {revision!r} "
                                  f"(a branch, tag or commit sha of {repo_id}): {e}") from e
        if any(isinstance(c, RepositoryNotFoundError) for c in causes):
            raise CheckpointError(f"{repo_id}@{revision}: the hub has no repo {repo_id!r} (or it is private or "
                                  f"gated and HF_TOKEN is not set or not granted access): {e}") from e
        where = ("the local HF cache (HF_HUB_OFFLINE is set; fetch it online first, the forward pass needs the "
                 "weights and the tokenizer files)" if offline else "the hub or the local HF cache")
        raise CheckpointError(f"could not get a snapshot of {repo_id}@{revision} from {where}: "
                              f"{type(e).__name__}: {e}") from e
    commit = os.path.basename(os.path.normpath(path))
    if not COMMIT_RE.fullmatch(commit):
        raise CheckpointError(f"snapshot {path} of {repo_id}@{revision} is not named by a commit sha")
    from fnmatch import fnmatch

    names = sorted(os.path.relpath(os.path.join(d, f), path).replace(os.sep, "/")
                   for d, _, fs in os.walk(path) for f in fs)
    names = [n for n in names if any(fnmatch(n, pat) for pat in allow)]
    if CONFIG not in names:
        raise CheckpointError(f"{repo_id}@{revision} (commit {commit}) has no config.json (expected an HF-layout repo)")
    weights = [n for n in names if n.endswith(".safetensors")]
    if not weights:
        raise CheckpointError(f"{repo_id}@{revision} (commit {commit}) has no safetensors weights; "
                              "pickle-format weights (*.bin, *.pt) are never loaded")
    source = _snapshot_record(path, repo_id, revision, commit, names, weights, transfer="snapshot (HF cache, offline)"
                              if offline else "snapshot (huggingface_hub.snapshot_download)")
    total, files = source["bytes_total"], source["files"]
    log(f"[hub {repo_id}] {revision} -> {commit}: snapshot for the forward pass, {len(files)} files, "
        f"{total / 2**20:.2f} MiB of weights" + (" (offline, HF cache)" if offline else ""))
    return path, source
