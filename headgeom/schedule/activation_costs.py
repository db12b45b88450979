"""Job resources of the activation stage (mem_mb, runtime in minutes) from the model's shape and
the window count. Constants measured on this project's 2-core machines (docs/costs.md,
`python bench/activation_costs.py`); SAFETY covers a loaded machine."""

from __future__ import annotations

import json

from headgeom.schedule.costs import job_resources

SAFETY = 2.0
BASE_MB = 1500  # python + torch + transformers imported


def _fields(manifest) -> dict:
    """A model's shape: a manifest path, or already its ``fields`` dict (``headgeom plan``)."""
    if isinstance(manifest, dict):
        return manifest
    with open(manifest) as fh:
        return json.load(fh)["fields"]


def activation_mib(f: dict, n_tokens: int) -> float:
    """float32 z and x of one layer for n_tokens tokens."""
    return 4 * n_tokens * (f["n_heads"] * f["d_head"] + f["d_model"]) / 2**20


# seconds per 1e9 multiply-adds (forward: 2 x params x tokens; read paths: per layer pair)
FORWARD_S_PER_GMAC = 0.05
# read paths: 0.039-0.063 s per 1e9 multiply-adds of read_path_gmac measured on one idle thread (bench/activation_costs.py,
# 2,048 tokens, at the shapes of Qwen2.5-7B, Gemma-3-270M, SmolLM2-135M and MiniLM-L6; a pair's work with its reader's
# bases, as a per-writer job does it); the largest, rounded up
READ_S_PER_GMAC = 0.065
LOAD_S = 120.0  # model load incl. GGUF dequantization and tokenizer conversion (gemma-3: the slowest)
COPY_S_PER_GIB = 4.0  # windows_job: seconds per GiB of activations read (and part of it written again)


def forward_resources(manifest, n_tokens: int) -> dict:
    f = _fields(manifest)
    L, D = f["n_layers"], f["d_model"]
    params = L * 12 * D * D  # dense transformer block estimate (attention + 4x MLP)
    gmac = params * n_tokens / 1e9
    mem = BASE_MB + 3 * 4 * params / 2**20 + 2 * L * activation_mib(f, n_tokens)
    t = LOAD_S + FORWARD_S_PER_GMAC * gmac * 2
    return job_resources(mem, t, SAFETY)


def windows_resources(manifest, n_tokens: int) -> dict:
    """The first windows of a longer forward pass of ``n_tokens`` tokens (jobs.activation.windows_job):
    every layer's activations read and a part written again, one layer at a time."""
    f = _fields(manifest)
    mem = BASE_MB + 2 * activation_mib(f, n_tokens)
    return job_resources(mem, COPY_S_PER_GIB * f["n_layers"] * activation_mib(f, n_tokens) / 1024, SAFETY)


def read_path_gmac(N: int, D: int, H: int, G: int, d: int) -> float:
    """1e9 multiply-adds of one (writer layer, reader layer) pair of the read paths, kinds Q, K, V
    (methods.read_paths, as a per-writer job computes them; R = H + 2 G readers): the pair's token
    products O^T xhat and X_j (2 N D H d) and S_j (N H d^2); per kind [M | R^T X] and the reader
    bases against [U | O F] (4 R H D d^2), every token's response (N D R d), E_lin's quadratic form
    (R H d^3), the composition's products (R H D d^2 + 3 H^2 d^3); the reader's bases, built per pair
    (4 R D d^2 + 10 R d^3 for Grams, projections and eigh) and its composition Grams ((H + G) D d^2)."""
    R = H + 2 * G
    return (2 * N * D * H * d + N * H * d**2 + 4 * R * H * D * d**2 + N * D * R * d + R * H * d**3
            + R * H * D * d**2 + 3 * H**2 * d**3 + 4 * R * D * d**2 + 10 * R * d**3 + (H + G) * D * d**2) / 1e9


def read_paths_resources(manifest, n_tokens: int, n_kinds: int = 3, layer: int | None = None) -> dict:
    """Writer layer ``layer``'s job reads every later layer (default: layer 0, the largest of the
    family); memory holds one writer and one reader layer at a time whatever the layer."""
    f = _fields(manifest)
    L, D, H, G, d = f["n_layers"], f["d_model"], f["n_heads"], f["n_kv_heads"], f["d_head"]
    readers = H + 2 * G
    readers_after = L - 1 if layer is None else L - 1 - int(layer)
    t = READ_S_PER_GMAC * read_path_gmac(n_tokens, D, H, G, d) * max(readers_after, 1) * n_kinds / 3
    mem = BASE_MB + 3 * activation_mib(f, n_tokens) * 2 + 8 * n_tokens * H * readers * d / 2**20 \
        + 8 * H * readers * d * d * 3 / 2**20
    return job_resources(mem, t, SAFETY)


def natural_return_resources(manifest, n_tokens: int) -> dict:
    """T y per head and token (y: the layer's residual input), 2 D d multiply-adds each, at the
    read paths' (upper-bound) rate, plus reading the layer's activations."""
    f = _fields(manifest)
    mem = BASE_MB / 2 + 3 * activation_mib(f, n_tokens)
    t = READ_S_PER_GMAC * n_tokens * f["n_heads"] * 2 * f["d_model"] * f["d_head"] / 1e9 + 1.0
    return job_resources(mem, t, SAFETY)


def gpus(device: str) -> int:
    """GPUs the forward job asks a scheduler for (resource `gpu`; the SLURM profile turns it into
    sbatch --gpus): one when config activation.device is cuda[:N], none on cpu. Whether CUDA is
    actually there is checked where the job runs (headgeom.io.forward.device_for)."""
    return 1 if str(device).startswith("cuda") else 0
