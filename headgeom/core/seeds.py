"""Deterministic seeds derived from (model, layer, head or pair, draw, purpose).

The same inputs give the same stream on every machine, executor and job order: the seed
depends only on these names, never on time, process or scheduling."""

from __future__ import annotations

import hashlib

import numpy as np


def seed_for(*parts) -> int:
    key = "|".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:16], "little")


def rng_for(*parts) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed_for(*parts)))
