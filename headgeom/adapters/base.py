"""Adapter interface: one adapter per architecture turns stored checkpoint tensors into
per-head factors (docs/methods.md §0).

An adapter never sees files. It gets
  * ``config``: the model's config (HF ``config.json`` as a dict, or GGUF metadata),
  * ``get(name) -> np.ndarray``: a tensor from the tensor store, by its checkpoint name,
and answers three questions: which tensors it needs (``wanted``), the architecture fields
recorded in the manifest (``fields``), and one layer's factors (``layer_factors``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, asdict
from typing import Callable, Iterable

import numpy as np

from headgeom.core.factors import LayerFactors

Getter = Callable[[str], np.ndarray]


@dataclass(frozen=True)
class ArchFields:
    adapter: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int  # d_v (paper 1's r); equals d_qk for every architecture supported so far
    norm_type: str  # what is folded into reading spaces: layernorm | rmsnorm | none
    norm_position: str  # pre | post
    prefix: str = ""  # key prefix found in the checkpoint ("", "model.", "bert.", ...)
    layout: str = ""  # an architecture's config-dependent layout (headgeom.adapters.architecture); "" for the others

    def to_dict(self) -> dict:
        d = asdict(self)
        if not d["layout"]:
            del d["layout"]  # manifests of the fixed-layout adapters stay as they were
        return d


class Adapter:
    name: str = ""
    #: HF ``config.json`` ``model_type`` values (or GGUF ``general.architecture``) it accepts
    model_types: tuple[str, ...] = ()
    #: "safetensors" or "gguf"
    fmt: str = "safetensors"
    #: regexes (after the prefix) of the tensors the adapter needs; {L} = layer index
    wanted_patterns: tuple[str, ...] = ()

    def fields(self, config: dict, keys: Iterable[str]) -> ArchFields:  # pragma: no cover
        raise NotImplementedError

    def layer_factors(self, get: Getter, f: ArchFields, layer: int) -> LayerFactors:  # pragma: no cover
        raise NotImplementedError

    def wanted(self, key: str, prefix: str = "") -> bool:
        if not key.startswith(prefix):
            return False
        rest = key[len(prefix):]
        return any(re.fullmatch(p.replace("{L}", r"\d+"), rest) for p in self.wanted_patterns)


def detect_prefix(keys: Iterable[str], anchor: str) -> str:
    """Longest-common prefix before ``anchor`` (e.g. 'layers.0.'), so 'model.', 'bert.',
    'transformer.' and bare checkpoints all resolve."""
    for k in keys:
        i = k.find(anchor)
        if i >= 0:
            return k[:i]
    return ""


def cfg(config: dict, *names, default=None, required=True):
    """First present key of a config dict (HF configs rename fields across architectures)."""
    for n in names:
        if n in config and config[n] is not None:
            return config[n]
    if required and default is None:
        from headgeom.core.errors import CheckpointError

        raise CheckpointError(f"config lacks all of {names}")
    return default


def present(get, prefix: str, suffixes) -> list[str]:
    """The ``suffixes`` (tensor names after ``prefix``) that the checkpoint holds; used to record
    which biases exist (docs/methods.md §0: biases are ignored, but recorded)."""
    out = []
    for s in suffixes:
        try:
            get(prefix + s)
        except KeyError:
            continue
        out.append(s)
    return out
