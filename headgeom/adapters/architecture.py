"""The adapter of any architecture described in ``headgeom.architectures``: per-head factors from the
architecture's module names, its split rule for a fused projection, Conv1D transposes, GQA/MQA grouping
and its norm fold rule. An architecture with a standard layout needs no adapter code of its own."""

from __future__ import annotations

import re

import numpy as np

from headgeom.architectures import ARCHITECTURES, Architecture, config_view, split_fused
from headgeom.core.factors import LayerFactors, gqa_map, split_cols, split_rows
from .base import Adapter, ArchFields, detect_prefix, present


class ArchitectureAdapter(Adapter):
    def __init__(self, architecture: Architecture):
        self.architecture = architecture
        self.name = architecture.name
        self.model_types = architecture.model_types
        # the checkpoint prefix is what precedes the layers path (``model.``, ``bert.``, ``transformer.``);
        # manifests written with the prefix before its last part (``model.decoder.`` + ``layers``) still read
        self._layers = architecture.layers
        self._leaf = architecture.layers.split(".")[-1]
        self._parent = architecture.layers[: -len(self._leaf)]
        lay = re.escape(architecture.layers)
        pats = []
        for variant in _variants(architecture):
            for mod in variant.tensors:
                pats.append(rf"{lay}\.{{L}}\.{re.escape(mod)}\.(weight|bias)")
        self.wanted_patterns = tuple(dict.fromkeys(pats))

    def fields(self, config, keys):
        c = config_view(config)
        fam = self.architecture.resolve(c)
        keys = list(keys)
        first = fam.qkv or fam.q
        prefix = detect_prefix(keys, f"{self._layers}.0.{first}.")
        # a config-dependent layout is recorded (the manifest then says which one it read); a fixed one is not
        layout = _layout_key(fam) if self.architecture.variant is not None else ""
        return ArchFields(adapter=self.name, norm_type=fam.norm_type, norm_position="post" if fam.post_ln else "pre",
                          prefix=prefix, layout=layout, **fam.shapes(c))

    def resolved(self, f: ArchFields) -> Architecture:
        if self.architecture.variant is None:
            return self.architecture
        for v in _variants(self.architecture):
            if _layout_key(v) == f.layout:
                return v
        raise ValueError(f"{self.name}: unknown layout {f.layout!r} in the manifest")

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        fam = self.resolved(f)
        within = self._leaf if self._parent and f.prefix.endswith(self._parent) else self._layers
        p = f"{f.prefix}{within}.{layer}."
        H, G, d = f.n_heads, f.n_kv_heads, f.d_head

        def w(mod):
            W = get(p + mod + ".weight")
            return np.ascontiguousarray(W.T) if fam.conv1d else W

        if fam.qkv:
            WQ, WK, WV = split_fused(w(fam.qkv), fam.split, H, G, d)
        else:
            WQ, WK, WV = split_rows(w(fam.q), H), split_rows(w(fam.k), G), split_rows(w(fam.v), G)
        if fam.norm is None:
            gain = None
        elif fam.norm_weight:
            gain = get(p + fam.norm + ".weight") + fam.norm_offset
        else:
            gain = np.ones(f.d_model)
        mods = [m for m in (fam.q, fam.k, fam.v, fam.qkv, fam.o) if m] + ([fam.norm] if fam.norm else [])
        folded = {"layernorm": "LayerNorm: centering P_c and gain", "rmsnorm": "RMSNorm gain",
                  "none": "nothing"}[fam.norm_type] + (f" (+{fam.norm_offset:g})" if fam.norm_offset else "")
        if fam.norm and not fam.norm_weight:
            folded += " (non-parametric: gain all ones)"
        if fam.post_ln:
            folded += " (post-LN: the input LayerNorm belongs to the previous block)"
        notes = {"folded": folded,
                 "bias": present(get, p, [m + ".bias" for m in mods]), "architecture": fam.name}
        if fam.split:
            notes["layout"] = f"fused {fam.qkv}: {fam.split}" + (" (Conv1D, transposed)" if fam.conv1d else "")
        for k in ("qk_norm", "post_norm", "parallel", "moe"):
            if getattr(fam, k):
                notes[k] = getattr(fam, k)
        return LayerFactors(W_Q=WQ, W_K=WK, W_V=WV, W_O=split_cols(w(fam.o), H), kv_group=gqa_map(H, G),
                            norm_gain=gain, norm_type=fam.norm_type if fam.norm else "none", notes=notes)


def _layout_key(fam: Architecture) -> str:
    return "|".join(str(x) for x in (fam.split, fam.norm, fam.norm_type, fam.kv_keys))


def _variants(fam: Architecture) -> list[Architecture]:
    """Every layout a config can give the architecture (for the tensors it may need)."""
    if fam.variant is None:
        return [fam]
    probes = [{}, {"new_decoder_architecture": True}, {"new_decoder_architecture": True, "num_ln_in_parallel_attn": 1},
              {"multi_query": False}, {"do_layer_norm_before": False}, {"qk_layernorm": True},
              {"use_qk_norm": True}, {"use_parallel_residual": True}]
    out = {}
    for c in probes:
        v = fam.resolve(c)
        out.setdefault(_layout_key(v), v)
    return list(out.values())


def architecture_adapters(skip) -> list[ArchitectureAdapter]:
    return [ArchitectureAdapter(f) for n, f in ARCHITECTURES.items() if n not in skip]
