"""Models from the Hugging Face hub, through huggingface_hub.

``open_hf_checkpoint(repo_id, revision)`` returns (checkpoint, source) where checkpoint has
the SafetensorsDir interface (config, keys(), read(keys), files()) and source records the
resolved commit sha. With HF_HUB_OFFLINE=1 it reads a populated HF cache.
"""

from __future__ import annotations

import os

from .checkpoint import SafetensorsDir
from .errors import CheckpointError

ALLOW = ["config.json", "*.safetensors", "model.safetensors.index.json"]


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def open_hf_checkpoint(repo_id: str, revision: str = "main", cache_dir=None):
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(
            repo_id,
            revision=revision,
            allow_patterns=ALLOW,
            cache_dir=cache_dir,
            local_files_only=_offline(),
        )
    except Exception as e:
        raise CheckpointError(
            f"could not get {repo_id}@{revision} from the hub"
            + (" (HF_HUB_OFFLINE is set and it is not in the local cache)" if _offline() else "")
            + f": {e}"
        ) from e
    # snapshot folders are named by the commit sha: that is the resolved revision.
    commit = os.path.basename(os.path.normpath(path))
    ckpt = SafetensorsDir(path)
    source = {"type": "hf", "repo_id": repo_id, "revision": revision, "commit_sha": commit}
    return ckpt, source
